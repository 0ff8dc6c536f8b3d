/*
 * Bootstrap from the launcher's environment (torchrun / launch.sh, mpirun, srun): rank and world come
 * from the launcher's variables, the hub is rank 0 at a rendezvous address every rank computes the
 * same way, and from there on it is the socket bootstrap (bootstrap_socket.c) with an id built here
 * instead of by weave_get_unique_id.
 *
 * Launchers are read in order of precedence: torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).
 * The first launcher with a rank or world variable set is used, and must be complete and valid. A
 * lower one whose variables are complete is checked against it: the same world with another rank,
 * or a larger world, is a contradiction (stale variables, or a script that sets RANK by hand under
 * mpirun). A smaller world is not: it is the outer launcher of a nested launch (`srun torchrun`, one
 * srun task per node starting several ranks), whose variables describe the launcher processes.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

typedef struct {
  const char *launcher;
  const char *rank, *world, *local_rank, *local_world; /* local_world may be NULL */
} launcher_vars_t;

static const launcher_vars_t launchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};
#define LAUNCHER_COUNT ((int)(sizeof(launchers) / sizeof(launchers[0])))

typedef struct {
  int present; /* its rank or world variable is set */
  int rank, world, local_rank, local_world;
} launcher_view_t;

static const char *env_get(const char *name) {
  const char *v = name ? getenv(name) : NULL;
  return v && *v ? v : NULL;
}

/* Reads launcher `l`. Returns WEAVE_SUCCESS with view->present = 0 when none of its variables are
 * set; an error (message recorded only when `report`) when they are incomplete or malformed. */
static weave_result_t read_launcher(const launcher_vars_t *l, launcher_view_t *view, int report) {
  memset(view, 0, sizeof(*view));
  view->local_rank = view->local_world = -1;
  const char *rs = env_get(l->rank), *ws = env_get(l->world);
  if (!rs && !ws) return WEAVE_SUCCESS;
  view->present = 1;
#define ENV_ERR(...) (report ? weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, __VA_ARGS__) : WEAVE_ERROR_BOOTSTRAP)
  if (!ws) return ENV_ERR("bootstrap (%s): %s=%s is set but %s is not", l->launcher, l->rank, rs, l->world);
  if (!rs) return ENV_ERR("bootstrap (%s): %s=%s is set but %s is not", l->launcher, l->world, ws, l->rank);
  long v;
  if (weave_parse_int(ws, 1, WEAVE_MAX_WORLD, &v))
    return ENV_ERR("bootstrap (%s): %s='%s': expected a world size in 1..%d", l->launcher, l->world, ws,
                   WEAVE_MAX_WORLD);
  view->world = (int)v;
  if (weave_parse_int(rs, 0, 1L << 30, &v))
    return ENV_ERR("bootstrap (%s): %s='%s': expected a rank (an integer >= 0)", l->launcher, l->rank, rs);
  if (v >= view->world)
    return ENV_ERR("bootstrap (%s): %s=%ld is not below %s=%d", l->launcher, l->rank, v, l->world, view->world);
  view->rank = (int)v;
  const char *lws = env_get(l->local_world), *lrs = env_get(l->local_rank);
  if (lws) {
    if (weave_parse_int(lws, 1, view->world, &v))
      return ENV_ERR("bootstrap (%s): %s='%s': expected an integer in 1..%s (%d)", l->launcher, l->local_world, lws,
                     l->world, view->world);
    view->local_world = (int)v;
  }
  if (lrs) {
    int hi = view->local_world > 0 ? view->local_world : view->world;
    if (weave_parse_int(lrs, 0, 1L << 30, &v))
      return ENV_ERR("bootstrap (%s): %s='%s': expected a local rank (an integer >= 0)", l->launcher, l->local_rank,
                     lrs);
    if (v >= hi)
      return ENV_ERR("bootstrap (%s): %s=%ld is not below %s=%d", l->launcher, l->local_rank, v,
                     view->local_world > 0 ? l->local_world : l->world, hi);
    view->local_rank = (int)v;
  }
#undef ENV_ERR
  return WEAVE_SUCCESS;
}

weave_result_t weave_bootstrap_env_rank_info(int *rank, int *world, int *local_rank, int *local_world) {
  int chosen = -1;
  launcher_view_t view[LAUNCHER_COUNT];
  for (int i = 0; i < LAUNCHER_COUNT; ++i) {
    if (chosen < 0) {
      WEAVE_CHECK(read_launcher(&launchers[i], &view[i], 1));
      if (view[i].present) chosen = i;
    } else if (read_launcher(&launchers[i], &view[i], 0) != WEAVE_SUCCESS) {
      view[i].present = 0; /* incomplete outer variables (an sbatch script's, say): not ours to judge */
    }
  }
  if (chosen < 0)
    return weave_fail(
        NULL, WEAVE_ERROR_BOOTSTRAP,
        "bootstrap: no launcher variables: set RANK and WORLD_SIZE (torchrun does), or start the ranks with "
        "mpirun (OMPI_COMM_WORLD_RANK/SIZE) or srun (SLURM_PROCID/SLURM_NTASKS)");
  const launcher_view_t *c = &view[chosen];
  const launcher_vars_t *cl = &launchers[chosen];
  for (int i = chosen + 1; i < LAUNCHER_COUNT; ++i) {
    const launcher_view_t *o = &view[i];
    const launcher_vars_t *ol = &launchers[i];
    if (!o->present) continue;
    if (o->world > c->world)
      return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                        "bootstrap: %s=%d but %s=%d: %s started more processes than %s says there are ranks (stale "
                        "variables? unset the ones that do not belong to this launch)",
                        cl->world, c->world, ol->world, o->world, ol->launcher, cl->launcher);
    if (o->world == c->world && o->rank != c->rank)
      return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                        "bootstrap: %s=%d but %s=%d with the same world size %d: the launchers disagree about this "
                        "process's rank (stale variables? unset the ones that do not belong to this launch)",
                        cl->rank, c->rank, ol->rank, o->rank, c->world);
  }
  if (rank) *rank = c->rank;
  if (world) *world = c->world;
  if (local_rank) *local_rank = c->local_rank;
  if (local_world) *local_world = c->local_world;
  return WEAVE_SUCCESS;
}

/* The job's id as every rank of it sees it ("" outside a batch system): keys the default port and
 * the id's nonce, so two jobs sharing a host do not meet by accident. */
static void job_id(char *buf, size_t cap) {
  const char *ompi = env_get("OMPI_MCA_ess_base_jobid"), *slurm = env_get("SLURM_JOB_ID");
  if (ompi)
    snprintf(buf, cap, "ompi:%s", ompi);
  else if (slurm)
    snprintf(buf, cap, "slurm:%s.%s", slurm, env_get("SLURM_STEP_ID") ? env_get("SLURM_STEP_ID") : "");
  else
    snprintf(buf, cap, "%s", "");
}

weave_result_t weave_bootstrap_env_rendezvous(char *addr, size_t addr_cap, int *port) {
  const char *a = env_get("MASTER_ADDR");
  if (!a) a = "127.0.0.1"; /* one node: no launcher told us where rank 0 is */
  if (!addr || strlen(a) >= addr_cap)
    return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "bootstrap: MASTER_ADDR is longer than %zu bytes",
                      addr_cap ? addr_cap - 1 : 0);
  long p;
  const char *v = env_get("WEAVE_BOOTSTRAP_PORT");
  if (v) {
    if (weave_parse_int(v, 1, 65535, &p))
      return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                        "bootstrap: WEAVE_BOOTSTRAP_PORT='%s': expected a port in 1..65535", v);
  } else if ((v = env_get("MASTER_PORT"))) {
    /* torch's own store listens on MASTER_PORT itself */
    if (weave_parse_int(v, 1, 65534, &p))
      return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                        "bootstrap: MASTER_PORT='%s': expected a port in 1..65534 (weave listens on MASTER_PORT + 1)",
                        v);
    p += 1;
  } else {
    char job[256];
    job_id(job, sizeof(job));
    p = 29500 + (long)(weave_fnv1a(WEAVE_FNV_OFFSET, job, strlen(job)) % 1000);
  }
  strcpy(addr, a);
  if (port) *port = (int)p;
  return WEAVE_SUCCESS;
}

/* Rank 0's listener on the rendezvous port, on every interface. SO_REUSEADDR lets a new job take the
 * port while the last one's connections linger in TIME_WAIT; a port still held by a live process is
 * retried until the deadline (the previous job may be exiting). */
static weave_result_t listen_on(int port, int64_t deadline_ms, int *out_fd) {
  int last = 0;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "bootstrap: rank 0: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 2 * WEAVE_MAX_WORLD) == 0) {
      *out_fd = fd;
      return WEAVE_SUCCESS;
    }
    last = errno;
    close(fd);
    if (last != EADDRINUSE || weave_monotonic_ms() >= deadline_ms)
      return weave_fail(
          NULL, WEAVE_ERROR_BOOTSTRAP,
          "bootstrap: rank 0 cannot listen on port %d (%s): another job holds it? set WEAVE_BOOTSTRAP_PORT "
          "(or MASTER_PORT) to a free port",
          port, strerror(last));
    struct timespec nap = {0, 50 * 1000000L};
    nanosleep(&nap, NULL);
  }
}

static weave_result_t resolve_ipv4(const char *host, uint32_t *addr) {
  const char *why = NULL;
  if (weave_resolve_ipv4(host, addr, &why) != 0)
    return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                      "bootstrap: MASTER_ADDR='%s' cannot be resolved to an IPv4 address (%s)", host, why);
  return WEAVE_SUCCESS;
}

weave_result_t weave_bootstrap_create_env(weave_bootstrap_t **bootstrap) {
  static const char who[] = "weave_bootstrap_create_env";
  if (!bootstrap) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: bootstrap is NULL", who);
  weave_env_t env;
  WEAVE_CHECK(weave_env_load(&env));
  int rank, world, local_rank, local_world;
  WEAVE_CHECK(weave_bootstrap_env_rank_info(&rank, &world, &local_rank, &local_world));
  char host[256];
  int port;
  WEAVE_CHECK(weave_bootstrap_env_rendezvous(host, sizeof(host), &port));
  weave_uid_t u;
  WEAVE_CHECK(resolve_ipv4(host, &u.addr));
  u.port = (uint16_t)port;
  /* every rank derives the same nonce from what the launcher gave all of them */
  char job[256];
  job_id(job, sizeof(job));
  const char *run = env_get("TORCHELASTIC_RUN_ID");
  uint64_t h = weave_fnv1a(WEAVE_FNV_OFFSET, host, strlen(host) + 1);
  h = weave_fnv1a(h, &port, sizeof(port));
  h = weave_fnv1a(h, &world, sizeof(world));
  h = weave_fnv1a(h, job, strlen(job) + 1);
  if (run) h = weave_fnv1a(h, run, strlen(run));
  u.nonce = h ? h : 1;
  /* one deadline for all of it: waiting for the port does not add to the bound */
  int64_t deadline = weave_monotonic_ms() + env.timeout_ms;
  int listen_fd = -1;
  if (rank == 0 && world > 1) WEAVE_CHECK(listen_on(port, deadline, &listen_fd));
  return weave_uid_bootstrap_create(&u, world, rank, listen_fd, local_rank, local_world, deadline, who, bootstrap);
}
