"""The dashboard page: one HTML document whose script reads the admin API every two seconds.

Served at ``/dashboard?token=...`` (a browser cannot send the bearer header for the page itself;
the script sends it for every API call and takes the token out of the address bar). No data is
in the page: everything it shows comes from the API, with the same token.
"""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tetrarch</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
.idle { color: #666; } .busy { color: #a60; font-weight: bold; } .failed, .fail, .exited { color: #c00; }
.running { color: #080; } .not-answering { color: #c60; }
ul.tree { list-style: none; padding-left: 1.2em; } #status { color: #888; }
</style></head>
<body>
<h1>tetrarch <span id="status">loading...</span></h1>
<h2>Hosts, procs and actors</h2><ul class="tree" id="tree"></ul>
<h2>Actor meshes</h2><table id="meshes"></table>
<h2>Endpoints</h2><table id="endpoints"></table>
<h2>Failures</h2><div id="failures">none</div>
<script>
const params = new URLSearchParams(location.search);
const token = params.get("token") || sessionStorage.getItem("tetrarch-token") || "";
sessionStorage.setItem("tetrarch-token", token);
history.replaceState(null, "", location.pathname);
const esc = s => String(s ?? "-").replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const cls = s => String(s).replace(/ /g, "-");
async function get(path) {
  const r = await fetch("/api/v1/" + path, {headers: {"Authorization": "Bearer " + token}});
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}
async function refresh() {
  try {
    const [hosts, procs, actors, meshes, failures] = await Promise.all(
      ["hosts", "procs", "actors", "meshes", "failures"].map(get));
    const byProc = {};
    for (const a of actors) (byProc[a.proc] = byProc[a.proc] || []).push(a);
    const byAgent = {};
    for (const p of procs) (byAgent[p.agent] = byAgent[p.agent] || []).push(p);
    document.getElementById("tree").innerHTML = hosts.map(h =>
      `<li><b>host agent ${esc(h.mesh)}[${h.index}]</b> <span class="${cls(h.state)}">${esc(h.state)}</span>
       pid ${h.pid} on ${esc(h.hostname)}<ul class="tree">` +
      (byAgent[h.address] || []).map(p =>
        `<li>${esc(p.name)} <span class="${cls(p.state)}">${esc(p.state)}</span> pid ${p.pid}
         ${p.rss_bytes ? (p.rss_bytes / 1048576).toFixed(1) + " MiB" : ""}<ul class="tree">` +
        (byProc[p.ident] || []).map(a =>
          `<li class="actor">${esc(a.mesh)}${esc(a.point)} <span class="${cls(a.state)}">${esc(a.state)}</span>
           mailbox ${a.mailbox}${a.endpoint ? " in " + esc(a.endpoint) : ""}</li>`).join("") +
        "</ul></li>").join("") + "</ul></li>").join("");
    document.getElementById("meshes").innerHTML =
      "<tr><th>mesh</th><th>class</th><th>shape</th><th>state</th><th>failed ranks</th></tr>" +
      meshes.map(m => `<tr><td>${esc(m.name)}</td><td>${esc(m.class)}</td>
        <td>${m.labels.map((l, i) => esc(l) + "=" + m.sizes[i]).join(" ")}</td>
        <td class="${cls(m.state)}">${esc(m.state)}</td>
        <td>${esc(m.failed_ranks.join(", ") || "")}</td></tr>`).join("");
    const eps = {};
    for (const a of actors) for (const [name, r] of Object.entries(a.endpoints || {})) {
      const k = a.mesh + "." + name, e = eps[k] || (eps[k] = {calls: 0, total: 0, max: 0});
      e.calls += r.calls; e.total += r.total_s; e.max = Math.max(e.max, r.max_s);
    }
    document.getElementById("endpoints").innerHTML =
      "<tr><th>endpoint</th><th>calls</th><th>mean ms</th><th>max ms</th></tr>" +
      Object.entries(eps).sort((x, y) => y[1].total - x[1].total).map(([k, e]) =>
        `<tr class="endpoint"><td>${esc(k)}</td><td>${e.calls}</td><td>${(1e3 * e.total / e.calls).toFixed(2)}</td>
         <td>${(1e3 * e.max).toFixed(2)}</td></tr>`).join("");
    document.getElementById("failures").innerHTML = failures.length ? "<ul>" + failures.map(f =>
      `<li class="failure"><b>${esc(f.actor)}</b> (${esc(f.mesh)} rank ${f.rank}): ${esc(f.cause)}` +
      (f.causes.length ? "<br>caused by " + f.causes.map(c => esc(c.actor) + ": " + esc(c.cause)).join("; ") : "") +
      "</li>").join("") + "</ul>" : "none";
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("status").textContent = "cannot read the API: " + e.message;
  }
}
refresh();
setInterval(refresh, 2000);
</script></body></html>
"""
