"""Report helpers shared by the benchmarks (bench_payload.py, the suite's runner)."""

from __future__ import annotations


def markdown_table(header: list[str], rows: list[list[str]], left: int = 3) -> str:
    """A markdown table, its first ``left`` columns aligned left and the others right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    right = [i >= left for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True)) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])
