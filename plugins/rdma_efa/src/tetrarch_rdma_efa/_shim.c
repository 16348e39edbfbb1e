/* tetrarch's shim over libfabric (compiled by _build.py through cffi's API mode).
 *
 * Most fi_* calls are static inline functions of the headers, so ctypes cannot reach
 * them; this file wraps the few the efa backend needs behind plain functions and one
 * struct (one RDM endpoint with its fabric, domain, address vector and completion queue).
 * Every function returns 0 (or a count) or a negative libfabric error code.
 */
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define TF_API FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

struct tf_ep {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
};

/* The mr_mode bits tetrarch handles (hints: the provider may ask for any of these). FI_MR_PROV_KEY
 * is offered only when the provider insists (tf_open asks without it first): with requested keys
 * tetrarch picks random 64-bit ones, which a peer cannot guess. */
static const int TF_MR_MODE = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED;

/* `hmem`: also ask for device memory (FI_HMEM), registered with its iface (FI_MR_HMEM).
 * `prov_key`: also accept keys the provider picks (FI_MR_PROV_KEY). */
static struct fi_info *tf_hints(const char *prov, int hmem, int prov_key)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return NULL;
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = TF_MR_MODE | (hmem ? FI_MR_HMEM : 0) | (prov_key ? FI_MR_PROV_KEY : 0);
    /* a write completes when its bytes are in the target's memory, not when they left ours */
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    if (prov) {
        hints->fabric_attr->prov_name = strdup(prov);
        if (!hints->fabric_attr->prov_name) {
            fi_freeinfo(hints);
            return NULL;
        }
    }
    return hints;
}

void tf_close(struct tf_ep *t)
{
    if (!t)
        return;
    if (t->ep) fi_close(&t->ep->fid);
    if (t->av) fi_close(&t->av->fid);
    if (t->cq) fi_close(&t->cq->fid);
    if (t->domain) fi_close(&t->domain->fid);
    if (t->fabric) fi_close(&t->fabric->fid);
    if (t->info) fi_freeinfo(t->info);
    free(t);
}

/* fi_getinfo for the hints (hmem, prov_key); `node` (or NULL) is the local address to bind. */
static int tf_getinfo(const char *prov, int hmem, int prov_key, const char *node, struct fi_info **info)
{
    struct fi_info *hints = tf_hints(prov, hmem, prov_key);
    int rc;

    if (!hints)
        return -FI_ENOMEM;
    rc = fi_getinfo(TF_API, node, NULL, node ? FI_SOURCE : 0, hints, info);
    fi_freeinfo(hints);
    return rc;
}

/* Open an RDM endpoint of provider `prov`. On failure *stage names the call that failed.
 * `hmem`: first ask for an endpoint that also moves device memory (FI_HMEM); a provider
 * (or a libfabric built) without it answers FI_ENODATA, and the host-memory one is asked for.
 * Each is asked for with requested keys first, then (a provider that insists) provider keys.
 * `node`: the local address the endpoint binds (FI_SOURCE), e.g. "127.0.0.1"; NULL: the
 * provider's choice (shm needs NULL; tcp would pick an interface itself). */
int tf_open(const char *prov, int hmem, const char *node, struct tf_ep **out, const char **stage)
{
    struct tf_ep *t = calloc(1, sizeof(*t));
    struct fi_cq_attr cq_attr;
    struct fi_av_attr av_attr;
    int rc = -FI_ENODATA, h, k;

    *out = NULL;
    *stage = "fi_allocinfo";
    if (!t)
        return -FI_ENOMEM;
    *stage = "fi_getinfo";
    for (h = hmem ? 1 : 0; h >= 0 && rc == -FI_ENODATA; h--)
        for (k = 0; k <= 1 && rc == -FI_ENODATA; k++)
            rc = tf_getinfo(prov, h, k, node, &t->info);
    if (rc) goto fail;
    *stage = "fi_fabric";
    rc = fi_fabric(t->info->fabric_attr, &t->fabric, NULL);
    if (rc) goto fail;
    *stage = "fi_domain";
    rc = fi_domain(t->fabric, t->info, &t->domain, NULL);
    if (rc) goto fail;
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_NONE;
    *stage = "fi_cq_open";
    rc = fi_cq_open(t->domain, &cq_attr, &t->cq, NULL);
    if (rc) goto fail;
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = t->info->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_MAP : t->info->domain_attr->av_type;
    *stage = "fi_av_open";
    rc = fi_av_open(t->domain, &av_attr, &t->av, NULL);
    if (rc) goto fail;
    *stage = "fi_endpoint";
    rc = fi_endpoint(t->domain, t->info, &t->ep, NULL);
    if (rc) goto fail;
    *stage = "fi_ep_bind(cq)";
    rc = fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc) goto fail;
    *stage = "fi_ep_bind(av)";
    rc = fi_ep_bind(t->ep, &t->av->fid, 0);
    if (rc) goto fail;
    *stage = "fi_enable";
    rc = fi_enable(t->ep);
    if (rc) goto fail;
    *stage = "";
    *out = t;
    return 0;
fail:
    tf_close(t);
    return rc < 0 ? rc : -rc;
}

/* What the provider chose: its name, the mr_mode bits in force, key size, limits. */
const char *tf_prov_name(struct tf_ep *t) { return t->info->fabric_attr->prov_name; }
const char *tf_fabric_name(struct tf_ep *t) { return t->info->fabric_attr->name; }
int tf_mr_mode(struct tf_ep *t) { return t->info->domain_attr->mr_mode; }
size_t tf_mr_key_size(struct tf_ep *t) { return t->info->domain_attr->mr_key_size; }
size_t tf_max_msg_size(struct tf_ep *t) { return t->info->ep_attr->max_msg_size; }
size_t tf_tx_size(struct tf_ep *t) { return t->info->tx_attr->size; }
int tf_has_hmem(struct tf_ep *t) { return (t->info->caps & FI_HMEM) != 0; }

ssize_t tf_getname(struct tf_ep *t, void *buf, size_t len)
{
    size_t n = len;
    int rc = fi_getname(&t->ep->fid, buf, &n);
    return rc ? rc : (ssize_t)n;
}

int tf_av_insert(struct tf_ep *t, const void *name, uint64_t *fi_addr)
{
    fi_addr_t a = FI_ADDR_UNSPEC;
    int rc = fi_av_insert(t->av, name, 1, &a, 0, NULL);
    if (rc != 1)
        return rc < 0 ? rc : -FI_EINVAL;
    *fi_addr = a;
    return 0;
}

int tf_av_remove(struct tf_ep *t, uint64_t fi_addr)
{
    fi_addr_t a = (fi_addr_t)fi_addr;
    return fi_av_remove(t->av, &a, 1, 0);
}

/* Register [buf, buf+len) for `access` (FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE).
 * `iface` is an enum fi_hmem_iface (FI_HMEM_SYSTEM for host memory; FI_HMEM_CUDA etc. with
 * `device` the ordinal, where the provider has FI_HMEM). `requested_key` is used unless the
 * provider picks keys (FI_MR_PROV_KEY). */
int tf_mr_reg(struct tf_ep *t, void *buf, size_t len, uint64_t access, uint64_t requested_key,
              int iface, int device, struct fid_mr **mr, uint64_t *key, void **desc)
{
    struct iovec iov = { buf, len };
    struct fi_mr_attr attr;
    int rc;

    memset(&attr, 0, sizeof(attr));
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = access;
    attr.requested_key = requested_key;
    attr.iface = (enum fi_hmem_iface)iface;
    if (attr.iface == FI_HMEM_CUDA)
        attr.device.cuda = device;
    else if (attr.iface == FI_HMEM_ROCR)
        attr.device.reserved = (uint64_t)device;
    rc = fi_mr_regattr(t->domain, &attr, 0, mr);
    if (rc)
        return rc;
    *key = fi_mr_key(*mr);
    *desc = fi_mr_desc(*mr);
    return 0;
}

int tf_mr_close(struct fid_mr *mr) { return fi_close(&mr->fid); }

ssize_t tf_read(struct tf_ep *t, void *buf, size_t len, void *desc, uint64_t src, uint64_t addr, uint64_t key,
                void *ctx)
{
    /* FI_COMPLETION only, not the endpoint's default FI_DELIVERY_COMPLETE: a read's completion
     * means its data is here either way, and that flag kept shm off its fast path (the reader
     * copies with process_vm_readv) for one the owner's progress thread serves. */
    struct iovec iov = {buf, len};
    struct fi_rma_iov rma = {addr, len, key};
    struct fi_msg_rma msg = {&iov, &desc, 1, (fi_addr_t)src, &rma, 1, ctx, 0};
    return fi_readmsg(t->ep, &msg, FI_COMPLETION);
}

ssize_t tf_write(struct tf_ep *t, const void *buf, size_t len, void *desc, uint64_t dest, uint64_t addr,
                 uint64_t key, void *ctx)
{
    return fi_write(t->ep, buf, len, desc, (fi_addr_t)dest, addr, key, ctx);
}

/* Up to `count` completions' op contexts into ctxs; -FI_EAGAIN: none; -FI_EAVAIL: an error entry waits. */
ssize_t tf_cq_read(struct tf_ep *t, void **ctxs, size_t count)
{
    struct fi_cq_entry entries[64];
    ssize_t n, i;

    if (count > 64)
        count = 64;
    n = fi_cq_read(t->cq, entries, count);
    for (i = 0; i < n; i++)
        ctxs[i] = entries[i].op_context;
    return n;
}

/* The waiting error entry: its op context, error code, and fi_cq_strerror's text in buf. */
int tf_cq_readerr(struct tf_ep *t, void **ctx, int *err, int *prov_errno, char *buf, size_t len)
{
    struct fi_cq_err_entry e;
    const char *text;
    ssize_t rc;

    memset(&e, 0, sizeof(e));
    rc = fi_cq_readerr(t->cq, &e, 0);
    if (rc < 0)
        return (int)rc;
    *ctx = e.op_context;
    *err = e.err;
    *prov_errno = e.prov_errno;
    text = fi_cq_strerror(t->cq, e.prov_errno, e.err_data, buf, len);
    if (text && text != buf && len) {
        strncpy(buf, text, len - 1);
        buf[len - 1] = 0;
    }
    return 0;
}

/* Ask the provider to cancel the operation posted with `ctx`: 0 (a completion, FI_ECANCELED or
 * ordinary, follows) or a negative code (e.g. -FI_ENOENT: the provider cannot cancel it). */
int tf_cancel(struct tf_ep *t, void *ctx) { return (int)fi_cancel(&t->ep->fid, ctx); }

size_t tf_context_size(void) { return sizeof(struct fi_context2); }
