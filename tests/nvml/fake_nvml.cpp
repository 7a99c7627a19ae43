/* A stand-in for libnvidia-ml.so.1 for tests on machines without a GPU: the
 * NVML entry points health/nvml.cpp loads, answering from a script named by
 * $INFERD_FAKE_NVML_SCRIPT (read by nvmlInit). Each line of the script is one
 * step, "key=value" words; '#' starts a comment. A step's settings stay until
 * a later step changes them:
 *   devices=N     GPUs NVML knows (default 1)
 *   mem_used=B mem_total=B temp=C ecc_corrected=N ecc_uncorrected=N
 *   reasons=MASK  clock event reasons (0x40: hardware thermal slowdown)
 *   lost=1        device queries answer NVML_ERROR_GPU_IS_LOST
 *   events=0      nvmlDeviceRegisterEvents answers NVML_ERROR_NOT_SUPPORTED
 *   xid=N         one Xid critical error event when the step begins (xid_gpu=I: on GPU I, default 0)
 *   until=PATH    the next step begins once PATH exists
 *   samples=N     ... or after N memory queries of GPU 0 (one per monitor sample)
 * Steps move on at a memory query of GPU 0; an Xid is read at the sample after.
 * A step with neither holds forever. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {

typedef int nvmlReturn_t;
enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, TIMEOUT = 10, GPU_IS_LOST = 15 };

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;

struct nvmlDevice_st {
  int index;
};
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct nvmlEventSet_st {
  int unused;
};
typedef struct nvmlEventSet_st* nvmlEventSet_t;

#define MAX_STEPS 64
#define MAX_DEVICES 16
#define MAX_EVENTS 256

struct step {
  char words[1024];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct step steps[MAX_STEPS];
static int n_steps, at = -1, samples_in_step;
static struct nvmlDevice_st devs[MAX_DEVICES];
static struct nvmlEventSet_st the_set;
static int registered[MAX_DEVICES];
static struct {
  int gpu;
  unsigned long long xid;
} events[MAX_EVENTS];
static int n_events;

/* The state the steps so far have set. */
static int devices = 1, lost, events_supported = 1, xid_gpu;
static unsigned long long mem_used = 1ull << 30, mem_total = 80ull << 30, ecc_c, ecc_u, reasons;
static unsigned temp = 40;
static char until[512];
static long samples_limit;

static void enter(int i) {
  at = i;
  samples_in_step = 0;
  until[0] = 0;
  samples_limit = 0;
  long long xid = -1;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", steps[i].words);
  for (char* tok = strtok(buf, " \t"); tok; tok = strtok(NULL, " \t")) {
    char* eq = strchr(tok, '=');
    if (!eq) continue;
    *eq = 0;
    const char* v = eq + 1;
    unsigned long long n = strtoull(v, NULL, 0);
    if (!strcmp(tok, "devices")) devices = n > MAX_DEVICES ? MAX_DEVICES : (int)n;
    else if (!strcmp(tok, "mem_used")) mem_used = n;
    else if (!strcmp(tok, "mem_total")) mem_total = n;
    else if (!strcmp(tok, "temp")) temp = (unsigned)n;
    else if (!strcmp(tok, "ecc_corrected")) ecc_c = n;
    else if (!strcmp(tok, "ecc_uncorrected")) ecc_u = n;
    else if (!strcmp(tok, "reasons")) reasons = n;
    else if (!strcmp(tok, "lost")) lost = (int)n;
    else if (!strcmp(tok, "events")) events_supported = (int)n;
    else if (!strcmp(tok, "xid_gpu")) xid_gpu = (int)n;
    else if (!strcmp(tok, "xid")) xid = (long long)n;
    else if (!strcmp(tok, "until")) snprintf(until, sizeof until, "%s", v);
    else if (!strcmp(tok, "samples")) samples_limit = (long)n;
  }
  if (xid >= 0 && n_events < MAX_EVENTS && xid_gpu < MAX_DEVICES) {
    events[n_events].gpu = xid_gpu;
    events[n_events].xid = (unsigned long long)xid;
    ++n_events;
  }
}

/* Moves on while the step's condition holds. */
static void advance(void) {
  while (at + 1 < n_steps) {
    if (until[0] && access(until, F_OK) == 0) enter(at + 1);
    else if (samples_limit > 0 && samples_in_step >= samples_limit) enter(at + 1);
    else break;
  }
}

static int bad(nvmlDevice_t d) { return !d || d < devs || d >= devs + devices; }

nvmlReturn_t nvmlInit_v2(void) {
  pthread_mutex_lock(&mu);
  /* Each init starts the script from its beginning. */
  n_steps = 0;
  n_events = 0;
  memset(registered, 0, sizeof registered);
  devices = 1, lost = 0, events_supported = 1, xid_gpu = 0;
  mem_used = 1ull << 30, mem_total = 80ull << 30, ecc_c = ecc_u = reasons = 0, temp = 40;
  const char* path = getenv("INFERD_FAKE_NVML_SCRIPT");
  FILE* f = path ? fopen(path, "r") : NULL;
  if (f) {
    char line[1024];
    while (n_steps < MAX_STEPS && fgets(line, sizeof line, f)) {
      char* hash = strchr(line, '#');
      if (hash) *hash = 0;
      line[strcspn(line, "\r\n")] = 0;
      if (strspn(line, " \t") == strlen(line)) continue;
      snprintf(steps[n_steps++].words, sizeof steps[0].words, "%s", line);
    }
    fclose(f);
  }
  for (int i = 0; i < MAX_DEVICES; ++i) devs[i].index = i;
  /* The first step applies at once (devices= must be known before a handle is asked for). */
  if (n_steps > 0) enter(0);
  pthread_mutex_unlock(&mu);
  return OK;
}

nvmlReturn_t nvmlShutdown(void) { return OK; }

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case NOT_FOUND: return "Not Found";
    case TIMEOUT: return "Timeout";
    case GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* out) {
  pthread_mutex_lock(&mu);
  nvmlReturn_t r = (int)index < devices ? OK : INVALID_ARGUMENT;
  if (r == OK) *out = &devs[index];
  pthread_mutex_unlock(&mu);
  return r;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* out) {
  /* "GPU-fake-N" is device N. */
  int n = -1;
  if (sscanf(uuid, "GPU-fake-%d", &n) != 1 || n < 0 || n >= devices) return NOT_FOUND;
  *out = &devs[n];
  return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  pthread_mutex_lock(&mu);
  nvmlReturn_t r = OK;
  if (bad(d)) r = INVALID_ARGUMENT;
  else {
    /* Steps move on at GPU 0's query only, so every GPU of one sample sees the same step. */
    if (d->index == 0) {
      advance();
      ++samples_in_step;
    }
    if (lost) r = GPU_IS_LOST;
    else {
      m->total = mem_total;
      m->used = mem_used;
      m->free = mem_total - mem_used;
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned* t) {
  (void)sensor;
  if (bad(d)) return INVALID_ARGUMENT;
  if (lost) return GPU_IS_LOST;
  *t = temp;
  return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long* n) {
  (void)counter;
  if (bad(d)) return INVALID_ARGUMENT;
  if (lost) return GPU_IS_LOST;
  *n = type == 1 ? ecc_u : ecc_c;
  return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long* mask) {
  if (bad(d)) return INVALID_ARGUMENT;
  if (lost) return GPU_IS_LOST;
  *mask = reasons;
  return OK;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  *set = &the_set;
  return OK;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  (void)set;
  return OK;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
  (void)types;
  (void)set;
  if (bad(d)) return INVALID_ARGUMENT;
  if (!events_supported) return NOT_SUPPORTED;
  pthread_mutex_lock(&mu);
  registered[d->index] = 1;
  pthread_mutex_unlock(&mu);
  return OK;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms) {
  (void)set;
  (void)timeout_ms;
  pthread_mutex_lock(&mu);
  nvmlReturn_t r = TIMEOUT;
  while (n_events > 0 && !registered[events[0].gpu]) {  /* NVML tells only of devices registered */
    memmove(events, events + 1, sizeof events[0] * (size_t)(n_events - 1));
    --n_events;
  }
  if (n_events > 0) {
    memset(data, 0, sizeof *data);
    data->device = &devs[events[0].gpu];
    data->eventType = 0x8; /* nvmlEventTypeXidCriticalError */
    data->eventData = events[0].xid;
    data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
    memmove(events, events + 1, sizeof events[0] * (size_t)(n_events - 1));
    --n_events;
    r = OK;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

}  // extern "C"
