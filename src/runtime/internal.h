/*
 * Internal host-side declarations shared by the runtime's C files: the team object, the bootstrap
 * interface, error/log helpers and the environment table.
 */
#ifndef WEAVE_INTERNAL_H
#define WEAVE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weave.h"
#include "runtime/heap.h"

/* ---- errors and logging ------------------------------------------------------------------ */
typedef enum { WEAVE_LOG_NONE = 0, WEAVE_LOG_WARN = 1, WEAVE_LOG_INFO = 2, WEAVE_LOG_TRACE = 3 } weave_log_level_t;

/* Records `fmt` as the last error of `team` (or of the calling thread when team is NULL), logs it at
 * WARN, and returns `code` so call sites read `return weave_fail(team, CODE, "...", ...)`. */
weave_result_t weave_fail(weave_team_t team, weave_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void weave_log(weave_log_level_t level, const weave_team_t team, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* on = 1 / 0 around calls whose failures the caller expects and reports itself (the tuner's
 * candidates): this thread's weave_fail then logs at INFO instead of WARN. Nests. */
void weave_log_quiet(int on);
/* The level WEAVE_DEBUG sets, read on every call (WARN when unset or invalid). */
weave_log_level_t weave_log_level(void);
int weave_parse_log_level(const char *s, weave_log_level_t *out); /* NONE|WARN|INFO|TRACE: 0, or -1 */

/* Returns a failed weave call's result (its message is already recorded). */
#define WEAVE_CHECK(call)                                         \
  do {                                                            \
    weave_result_t weave_check_rc_ = (call);                      \
    if (weave_check_rc_ != WEAVE_SUCCESS) return weave_check_rc_; \
  } while (0)

/* The CUDA check of library code: a failed CUDA runtime call becomes the team's last error,
 * "<call> failed: <CUDA error string> (file:line)", and the caller returns WEAVE_ERROR_CUDA. Only
 * for files that include cuda_runtime_api.h (the host core builds without CUDA). */
#define WEAVE_CUDA_CHECK(team, call)                                                                                   \
  do {                                                                                                                 \
    cudaError_t weave_cuda_err_ = (call);                                                                              \
    if (weave_cuda_err_ != cudaSuccess)                                                                                \
      return weave_fail((team), WEAVE_ERROR_CUDA, "%s failed: %s (%s:%d)", #call, cudaGetErrorString(weave_cuda_err_), \
                        __FILE__, __LINE__);                                                                           \
  } while (0)

/* ---- environment ---------------------------------------------------------------------------- */
typedef struct {
  weave_log_level_t debug;
  size_t heap_size;
  int timeout_ms;
  int info;
  char tune_file[512];
  char trace[512];
  int tma_epilogue;
  int autotune;                    /* WEAVE_AUTOTUNE: AUTO plans time their candidates when nothing is cached */
  weave_strategy_t delay_strategy; /* WEAVE_TEST_DELAY=<strategy>:<us>: that strategy's calls start with a */
  int delay_us;                    /* delay of us microseconds (0: none), to test that auto avoids it */
  int ranks_per_node;              /* WEAVE_RANKS_PER_NODE: pretend nodes of that many ranks (0: by host) */
} weave_env_t;

/* Reads every WEAVE_* variable (at each team/plan creation); a bad value is WEAVE_ERROR_ENV (message in
 * weave_get_last_error(NULL)), never a silent default. */
weave_result_t weave_env_load(weave_env_t *env);
/* Parsers, exposed for tests. Return 0 on success, -1 on a malformed value. */
int weave_parse_size(const char *s, size_t *out); /* 123, 64K, 512M, 2G, 1T */
int weave_parse_int(const char *s, long lo, long hi, long *out);
/* A Hopper GEMM knob (WEAVE_HGEMM_*, runtime/env.c): its value, or its default when unset, empty or
 * invalid (with a warning). */
int weave_hgemm_knob(const char *name);
/* The Hopper GEMM's knobs that are not at their defaults, as the tuning cache's key holds them (other
 * values, other kernels): a letter a knob (p PINGPONG, s STREAMK, c CLUSTER, t TMA_STORE, g GROUP_M, w
 * PROMOTE_WGS) and its value, in that order; "" when every knob is at its default. */
void weave_hgemm_knobs_key(char *buf, size_t len);
int weave_parse_bool(const char *s, int *out); /* 0/1/true/false/yes/no/on/off */

/* ---- bootstrap ----------------------------------------------------------------------------- */
struct weave_bootstrap {
  int world;
  int timeout_ms;
  /* The rank this object belongs to and its index among the ranks of its host (local_world of
   * them). The threads bootstrap serves every rank of the process with one object: rank and
   * local_rank are -1 there, local_world is world. */
  int rank;
  int local_rank;
  int local_world;
  /* Every rank passes `bytes` bytes; out receives world * bytes, rank-major. */
  weave_result_t (*allgather)(weave_bootstrap_t *bs, int rank, const void *in, void *out, size_t bytes);
  weave_result_t (*barrier)(weave_bootstrap_t *bs, int rank);
  void (*destroy)(weave_bootstrap_t *bs);
  void *impl;
};

#define WEAVE_BOOTSTRAP_MAX_BYTES 1024 /* per rank per allgather */

/* Which machine a rank runs on, as far as sharing memory goes: hostname + boot id + network
 * namespace (bootstrap_socket.c). Ranks with equal ids can pass file descriptors over abstract
 * AF_UNIX sockets. Plain bytes: it travels through allgather. */
typedef struct {
  uint64_t hash;
  char name[56]; /* hostname, for messages (truncated) */
} weave_host_id_t;
void weave_host_id(weave_host_id_t *id);
int weave_same_host(const weave_host_id_t *a, const weave_host_id_t *b);
/* The node of every rank from the ranks' host ids: ranks of one host form a node, nodes numbered in
 * the order of their first rank. With ranks_per_node > 0 (WEAVE_RANKS_PER_NODE: tests split ranks that
 * share a host, or a GPU, into pretend nodes) ranks [k n, (k + 1) n) form node k instead, each on one
 * host. Returns the number of nodes, or -1 with why (a pretend node across hosts, a bad argument). */
int weave_node_split(const weave_host_id_t *ids, int world, int ranks_per_node, int *node_of_rank, char *why,
                     size_t why_len);
/* This process's pid namespace, hashed (0 when unknown): with the host id and the pid it tells
 * whether two ranks share an address space (two containers of one host may both have a pid 1). */
uint64_t weave_pid_namespace(void);

/* The socket bootstrap's id, decoded (bootstrap_socket.c): the hub's IPv4 address (network order),
 * port, and a nonce every rank of one bootstrap shares. */
typedef struct {
  uint32_t addr;
  uint16_t port;
  uint64_t nonce;
} weave_uid_t;
void weave_uid_encode(const weave_uid_t *u, weave_unique_id_t *id);
/* host as an IPv4 address in network order (dotted quad or a name): 0, or -1 with *why. */
int weave_resolve_ipv4(const char *host, uint32_t *addr, const char **why);
/* Creates rank `rank` of a socket bootstrap: the hub when listen_fd >= 0 (a listening socket it takes
 * over and closes), else a spoke that connects to u. local_rank/local_world override the ones found
 * from the ranks' hosts when >= 0. The creation ends by deadline_ms (CLOCK_MONOTONIC, in ms; 0: the
 * timeout from now). `who` names the public function in messages. */
weave_result_t weave_uid_bootstrap_create(const weave_uid_t *u, int world, int rank, int listen_fd, int local_rank,
                                          int local_world, int64_t deadline_ms, const char *who,
                                          weave_bootstrap_t **bootstrap);
int64_t weave_monotonic_ms(void);
int weave_remaining_ms(int64_t deadline_ms);                  /* ms until a weave_monotonic_ms deadline, >= 0 */
uint64_t weave_fnv1a(uint64_t h, const void *data, size_t n); /* FNV-1a 64, chained through h */
#define WEAVE_FNV_OFFSET 1469598103934665603ull

/* The launcher's view of this process (bootstrap_env.c): RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE
 * (torchrun), else OMPI_COMM_WORLD_*, else SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. local_rank and
 * local_world are -1 when the launcher does not say. WEAVE_ERROR_BOOTSTRAP naming the variable when
 * one is missing, malformed or contradicts another launcher's. Outputs written only on success. */
weave_result_t weave_bootstrap_env_rank_info(int *rank, int *world, int *local_rank, int *local_world);
/* Where weave_bootstrap_create_env meets: MASTER_ADDR (default 127.0.0.1) and WEAVE_BOOTSTRAP_PORT,
 * else MASTER_PORT + 1, else 29500 + hash(job id) % 1000. `addr` gets the address as written. */
weave_result_t weave_bootstrap_env_rendezvous(char *addr, size_t addr_cap, int *port);

/* Collective over `bs` (rank `rank` calls it from its own thread): every rank passes an fd of its own
 * or -1. On success peer_fds[r] (world entries) is a new descriptor of this process referring to rank
 * r's object, for every rank r of another process on this host that passed one; -1 for this rank,
 * for ranks of this process (they share the address space), of other hosts, and for ranks that
 * passed -1. The caller closes the descriptors. All ranks succeed or all fail (fd_exchange.c). */
weave_result_t weave_bootstrap_exchange_fds(weave_bootstrap_t *bs, int rank, int fd, int *peer_fds);

/* ---- team ---------------------------------------------------------------------------------- */
struct weave_team {
  weave_bootstrap_t *bootstrap;
  int rank, world;
  weave_device_info_t info;
  size_t heap_size;
  int timeout_ms;
  struct weave_symmetric_heap *symmetric; /* the memory behind the heaps (symmetric_heap.c) */
  void *heap_base;                        /* this rank's heap (device memory) */
  void *peer_bases[WEAVE_MAX_WORLD];      /* every rank's heap as addressable from this rank */
  void **d_bases;                         /* device copy of peer_bases */
  weave_heap_t heap;
  int threads_on_device;              /* ranks of this team in this process that share its GPU */
  int peers_unmapped;                 /* ranks whose heap this rank cannot address (other hosts):
                                       * only plans past one node, NCCL between hosts, run then */
  int abort_told;                     /* this rank's abort notice reached every rank's header */
  int aborted_by;                     /* 0, or 1 + the rank that aborted the team (this one, by
                                       * weave_team_abort, or a peer, as weave_team_sync found; -1:
                                       * the record said aborted before the notice naming the rank) */
  weave_bootstrap_t *owned_bootstrap; /* made for the team, destroyed with it (weave_team_create_from_nccl) */
  int nodes;                          /* the team's nodes (weave_node_split) */
  int node_of_rank[WEAVE_MAX_WORLD];
  /* the node team and the rail team of the plans past one node (plan/hier.c): made by the first such
   * plan, shared by the later ones, destroyed with this team; their errors and aborts are this
   * team's (weave_team_sync, weave_team_poll, weave_team_abort look at them too) */
  struct weave_team *sub[2];
  struct weave_team *parent; /* for a node or rail team: the team it was split from (its abort stops
                              * this team's device waits: weave_device_team_t.parent_error) */
  int beside_others;         /* a node or rail team whose GPU holds ranks of other such teams (pretend
                              * nodes sharing a GPU): their plans run at the same time as this one's */
  char last_error[1024];
};

/* WEAVE_SUCCESS where this rank can address every rank's heap, else WEAVE_ERROR_UNSUPPORTED naming
 * a peer on another host, with `what` first. Local, yet the same on every rank of the team (hosts
 * are a symmetric relation: on several hosts every rank has a peer on another). */
weave_result_t weave_team_require_mapped(weave_team_t team, const char *what);
/* The device address of this rank's error code in `team`'s heap header: a node or rail team's waits
 * watch their parent's (weave_device_team_t.parent_error), a step after one on `team` checks it
 * before it publishes (kernels.h, upstream_error). */
const uint32_t *weave_team_error_code(weave_team_t team);

/* The team's device made current for a call that does CUDA work, and the caller's CUDA context given
 * back after it (weave_device_leave): a thread that drives several GPUs keeps its own current device
 * across weave calls. A thread with no current context keeps the team's device current after the
 * call (as a CUDA call would leave it), so no context is made on a device the caller never used. */
typedef struct {
  void *context; /* the caller's CUcontext, to be made current again; NULL: nothing to give back */
} weave_device_scope_t;
weave_device_scope_t weave_device_enter(int device);
/* Whether `device` reads pageable host memory (cudaDevAttrPageableMemoryAccess: HMM / ATS); 0 when
 * the attribute cannot be read. */
int weave_pageable_access(int device);
void weave_device_leave(weave_device_scope_t scope);

/* WEAVE_ERROR_ABORTED (the last error naming `fn` and the aborting rank) once the team is aborted,
 * else success: the first check of every call that communicates. */
weave_result_t weave_team_check_live(weave_team_t team, const char *fn);
/* Reads this rank's heap header: a peer's abort notice makes the team aborted here too (without a
 * weave_team_sync). For calls that wait for the device anyway (plan destroy). */
void weave_team_refresh_abort(weave_team_t team);

/* Collective: every rank's `mine` into all[0 .. world-1]; a bootstrap failure is the team's last error. */
weave_result_t weave_team_allgather_int(weave_team_t team, int mine, int *all);
/* Collective agreement: every rank contributes `local`; all ranks fail together. A rank that failed
 * returns its own code and keeps its own last error; the others return the first failing rank's code
 * and name that rank in the last error. */
weave_result_t weave_team_agree(weave_team_t team, weave_result_t local);
/* Collective: checks that every rank passed the same `bytes` of `what`. */
weave_result_t weave_team_check_same(weave_team_t team, const void *data, size_t bytes, const char *what);

#endif /* WEAVE_INTERNAL_H */
