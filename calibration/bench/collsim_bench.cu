// collsim-bench: times NCCL collectives the way nccl-tests does and records the machine they ran
// on, for `collsim calibrate`.
//
// One process drives every GPU it is given (nccl-tests' `-g N`); under a launcher (mpirun, srun)
// each process drives its own GPUs and they form one communicator (see `World`). For each
// collective, data type,
// forced NCCL_ALGO/NCCL_PROTO combination and size it runs warm-up calls, then `iters`
// back-to-back calls on one stream per GPU, and reports wall-clock time per call, out-of-place
// and in-place, with nccl-tests' algbw/busbw and a check of the result. Output: nccl-tests text
// (results.txt), the same rows as JSON (results.json), the environment (env.json: GPUs, driver,
// NCCL version, `nvidia-smi topo -m`, single-GPU facts) and NCCL's own view of the machine
// (NCCL_TOPO_DUMP_FILE, NCCL_GRAPH_DUMP_FILE, NCCL_DEBUG=INFO lines) in the output folder.
//
// Exit codes: 0 done, 1 bad arguments or a failed call, 2 no CUDA GPU on this machine.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

void die(const std::string& msg) {
  std::fprintf(stderr, "collsim-bench: %s\n", msg.c_str());
  std::exit(1);
}

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) die(std::string(#call) + ": " + cudaGetErrorString(e_));   \
  } while (0)

#define NCCL_OK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) die(std::string(#call) + ": " + ncclGetErrorString(r_));   \
  } while (0)

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv };

struct CollInfo {
  const char* name;
  Coll coll;
};
const CollInfo kColls[] = {{"all_reduce", Coll::AllReduce},       {"all_gather", Coll::AllGather},
                           {"reduce_scatter", Coll::ReduceScatter}, {"broadcast", Coll::Broadcast},
                           {"reduce", Coll::Reduce},               {"alltoall", Coll::AllToAll},
                           {"sendrecv", Coll::SendRecv}};

struct TypeInfo {
  const char* name;
  ncclDataType_t type;
  size_t size;
};
const TypeInfo kTypes[] = {{"int8", ncclInt8, 1},     {"uint8", ncclUint8, 1},
                           {"int32", ncclInt32, 4},   {"uint32", ncclUint32, 4},
                           {"int64", ncclInt64, 8},   {"uint64", ncclUint64, 8},
                           {"half", ncclFloat16, 2},  {"float", ncclFloat32, 4},
                           {"double", ncclFloat64, 8}, {"bfloat16", ncclBfloat16, 2}};

template <typename T>
__device__ T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __half from_float<__half>(float v) {
  return __float2half(v);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <typename T>
__device__ float to_float(T v) {
  return static_cast<float>(v);
}
template <>
__device__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Element i of a rank's input is (chunk_base + i / chunk) so that every chunk (a peer's share)
// is recognisable after the collective; values stay small enough to be exact in every type.
template <typename T>
__global__ void fill(T* p, size_t n, size_t chunk, float base) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = from_float<T>(base + static_cast<float>((i / chunk) % 8));
}

// Counts elements differing from expected[(i / chunk) % nexp].
template <typename T>
__global__ void count_wrong(const T* p, size_t n, size_t chunk, const float* expected, int nexp,
                            unsigned long long* wrong) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float want = expected[(i / chunk) % nexp];
    if (fabsf(to_float<T>(p[i]) - want) > 1e-3f * fmaxf(1.0f, fabsf(want))) atomicAdd(wrong, 1ULL);
  }
}

__global__ void empty_kernel() {}

__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = in[i];
}

template <typename F>
void by_type(ncclDataType_t t, F f) {
  switch (t) {
    case ncclInt8: f(static_cast<int8_t*>(nullptr)); break;
    case ncclUint8: f(static_cast<uint8_t*>(nullptr)); break;
    case ncclInt32: f(static_cast<int32_t*>(nullptr)); break;
    case ncclUint32: f(static_cast<uint32_t*>(nullptr)); break;
    case ncclInt64: f(static_cast<int64_t*>(nullptr)); break;
    case ncclUint64: f(static_cast<uint64_t*>(nullptr)); break;
    case ncclFloat16: f(static_cast<__half*>(nullptr)); break;
    case ncclFloat32: f(static_cast<float*>(nullptr)); break;
    case ncclFloat64: f(static_cast<double*>(nullptr)); break;
    case ncclBfloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    default: die("unsupported data type");
  }
}

struct Options {
  std::vector<const CollInfo*> colls;
  std::vector<const TypeInfo*> types;
  std::vector<std::string> algos{"default"};
  std::vector<std::string> protos{"default"};
  size_t min_bytes = 8, max_bytes = 64u << 20, factor = 2;
  int ngpus = 0, warmup = 5, iters = 20;
  bool check = true, facts_only = false, print_world = false;
  std::string out = "collsim-bench-out";
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(item);
  return v;
}

size_t parse_size(const char* flag, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) die(std::string(flag) + " " + s + ": not a size");
  std::string unit(end);
  double mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "m" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) die(std::string(flag) + " " + s + ": unknown unit (K, M, G)");
  return static_cast<size_t>(v * mult);
}

const char* kUsage =
    "usage: collsim-bench [-c all_reduce,all_gather,...] [-d float,half,...] [-b MIN] [-e MAX]\n"
    "                     [-f FACTOR] [-g NGPUS] [-w WARMUP] [-n ITERS] [-a ALGOS] [-p PROTOS]\n"
    "                     [-o OUTDIR] [--no-check] [--facts-only] [--print-world]\n"
    "  -a/-p take comma lists of NCCL_ALGO/NCCL_PROTO values; 'default' leaves NCCL to choose.\n"
    "  Under mpirun or srun every process drives -g GPUs (default 1) and they form one\n"
    "  communicator; OUTDIR must then be on a filesystem all of them share (rank 0 leaves\n"
    "  NCCL's unique id there) and rank 0 writes the results. --print-world prints how the\n"
    "  launcher's environment was read and exits.\n";

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + ": needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "-c" || a == "--collectives") {
      for (auto& n : split(val())) {
        const CollInfo* f = nullptr;
        for (auto& c : kColls)
          if (n == c.name) f = &c;
        if (!f) die("-c " + n + ": unknown collective");
        o.colls.push_back(f);
      }
    } else if (a == "-d" || a == "--dtypes") {
      for (auto& n : split(val())) {
        const TypeInfo* f = nullptr;
        for (auto& t : kTypes)
          if (n == t.name) f = &t;
        if (!f) die("-d " + n + ": unknown data type");
        o.types.push_back(f);
      }
    } else if (a == "-b" || a == "--min-bytes") o.min_bytes = parse_size("-b", val());
    else if (a == "-e" || a == "--max-bytes") o.max_bytes = parse_size("-e", val());
    else if (a == "-f" || a == "--factor") o.factor = parse_size("-f", val());
    else if (a == "-g" || a == "--ngpus") o.ngpus = std::atoi(val().c_str());
    else if (a == "-w" || a == "--warmup") o.warmup = std::atoi(val().c_str());
    else if (a == "-n" || a == "--iters") o.iters = std::atoi(val().c_str());
    else if (a == "-a" || a == "--algos") o.algos = split(val());
    else if (a == "-p" || a == "--protos") o.protos = split(val());
    else if (a == "-o" || a == "--out") o.out = val();
    else if (a == "--no-check") o.check = false;
    else if (a == "--facts-only") o.facts_only = true;
    else if (a == "--print-world") o.print_world = true;
    else die(a + ": unknown option (see --help)");
  }
  if (o.colls.empty()) o.colls.push_back(&kColls[0]);
  if (o.types.empty()) o.types.push_back(&kTypes[7]);
  if (o.factor < 2) die("-f: the factor must be at least 2");
  if (o.min_bytes > o.max_bytes) die("-b is larger than -e");
  if (o.iters < 1 || o.warmup < 0) die("-n must be at least 1 and -w at least 0");
  return o;
}

// The processes a launcher started: this one's rank among them, their number, and its rank on
// its node, from the variables Open MPI, MPICH / Intel MPI (Hydra) and Slurm set. One process
// when none is set.
struct World {
  int rank = 0, size = 1, local = 0;
  std::string from = "none";
};

World read_world() {
  struct Names {
    const char *rank, *size, *local, *from;
  };
  const Names kNames[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI (MPICH, Intel MPI)"},
      // The step's task count, which srun sets: a batch script's own SLURM_NTASKS is not a
      // world this process is part of.
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "Slurm (srun)"},
  };
  World w;
  for (const auto& n : kNames) {
    const char* r = std::getenv(n.rank);
    const char* z = std::getenv(n.size);
    if (!r || !z) continue;
    w.rank = std::atoi(r);
    w.size = std::atoi(z);
    const char* l = std::getenv(n.local);
    w.local = l ? std::atoi(l) : -1;
    w.from = n.from;
    if (w.size < 1 || w.rank < 0 || w.rank >= w.size)
      die(std::string(n.rank) + "=" + r + ", " + n.size + "=" + z + ": not a rank of the world");
    return w;
  }
  return w;
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += c;
    else if (c == '\n') r += "\\n";
    else if (c == '\t') r += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20) continue;
    else r += c;
  }
  return r;
}

std::string run_command(const char* cmd) {
  std::string out;
  FILE* p = popen(cmd, "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

double busbw_factor(Coll c, int n) {
  switch (c) {
    case Coll::AllReduce: return 2.0 * (n - 1) / n;
    case Coll::AllGather:
    case Coll::ReduceScatter:
    case Coll::AllToAll: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

// One size of one collective: what nccl-tests prints.
struct Row {
  std::string coll, dtype, redop, algo, proto;
  size_t size, count;
  int root;
  double oop_us, ip_us, oop_algbw, ip_algbw, oop_busbw, ip_busbw;
  long long oop_wrong, ip_wrong;  // -1: not checked
};

struct Gpu {
  int dev;
  int rank;  // in the communicator
  ncclComm_t comm;
  cudaStream_t stream;
  void* send;
  void* recv;
  float* expected;
  unsigned long long* wrong;
  void* scratch;  // kScratch bytes for the bench's own exchanges (rank lines, timings)
};

constexpr size_t kScratch = 256 * 1024;

// Byte counts as nccl-tests sizes them: `size` the column it prints, `count` its per-call count,
// send/recv element counts per rank.
struct Counts {
  size_t size, count, send, recv;
};

Counts counts(Coll c, size_t bytes, size_t elt, int n) {
  size_t total = bytes / elt;
  switch (c) {
    case Coll::AllGather: {
      size_t per = total / n;
      return {per * n * elt, per, per, per * n};
    }
    case Coll::ReduceScatter: {
      size_t per = total / n;
      return {per * n * elt, per, per * n, per};
    }
    case Coll::AllToAll: {
      size_t per = total / n;
      return {per * n * elt, per, per * n, per * n};
    }
    default: return {total * elt, total, total, total};
  }
}

void launch(Coll c, Gpu& g, int rank, int n, const TypeInfo& t, const Counts& k, bool in_place) {
  char* send = static_cast<char*>(g.send);
  char* recv = in_place ? send : static_cast<char*>(g.recv);
  size_t elt = t.size;
  switch (c) {
    case Coll::AllReduce:
      NCCL_OK(ncclAllReduce(send, recv, k.count, t.type, ncclSum, g.comm, g.stream));
      break;
    case Coll::AllGather:
      // In place: the rank's input is its own slot of the output.
      NCCL_OK(ncclAllGather(in_place ? recv + rank * k.count * elt : send, recv, k.count, t.type,
                            g.comm, g.stream));
      break;
    case Coll::ReduceScatter:
      NCCL_OK(ncclReduceScatter(send, in_place ? send + rank * k.count * elt : recv, k.count,
                                t.type, ncclSum, g.comm, g.stream));
      break;
    case Coll::Broadcast:
      NCCL_OK(ncclBroadcast(send, recv, k.count, t.type, 0, g.comm, g.stream));
      break;
    case Coll::Reduce:
      NCCL_OK(ncclReduce(send, recv, k.count, t.type, ncclSum, 0, g.comm, g.stream));
      break;
    case Coll::AllToAll:
      NCCL_OK(ncclGroupStart());
      for (int p = 0; p < n; ++p) {
        NCCL_OK(ncclSend(send + p * k.count * elt, k.count, t.type, p, g.comm, g.stream));
        NCCL_OK(ncclRecv(static_cast<char*>(g.recv) + p * k.count * elt, k.count, t.type, p,
                         g.comm, g.stream));
      }
      NCCL_OK(ncclGroupEnd());
      break;
    case Coll::SendRecv:
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclSend(send, k.count, t.type, (rank + 1) % n, g.comm, g.stream));
      NCCL_OK(ncclRecv(static_cast<char*>(g.recv), k.count, t.type, (rank + n - 1) % n, g.comm,
                       g.stream));
      NCCL_OK(ncclGroupEnd());
      break;
  }
}

// Fills every rank's input: rank r holds values (r + 1) + (i / chunk) % 8 with one chunk per peer
// share, and returns, per rank, where the result lies and what it must hold.
struct Expect {
  size_t offset, count, chunk;
  std::vector<float> values;
};

Expect expectation(Coll c, int rank, int n, const Counts& k, bool in_place) {
  // The input value of rank r in chunk j is (r + 1) + j % 8 (j = the peer share index).
  auto input = [](int r, size_t j) { return static_cast<float>(r + 1) + static_cast<float>(j % 8); };
  Expect e{0, 0, 1, {}};
  switch (c) {
    case Coll::AllReduce: {
      e.count = k.count;
      e.chunk = k.count ? k.count : 1;
      float s = 0;
      for (int r = 0; r < n; ++r) s += input(r, 0);
      e.values = {s};
      break;
    }
    case Coll::AllGather:
      e.count = k.count * n;
      e.chunk = k.count ? k.count : 1;
      for (int r = 0; r < n; ++r) e.values.push_back(input(r, 0));
      break;
    case Coll::ReduceScatter: {
      e.offset = in_place ? rank * k.count : 0;
      e.count = k.count;
      e.chunk = k.count ? k.count : 1;
      float s = 0;
      for (int r = 0; r < n; ++r) s += input(r, rank);
      e.values = {s};
      break;
    }
    case Coll::Broadcast:
      e.count = k.count;
      e.chunk = k.count ? k.count : 1;
      e.values = {input(0, 0)};
      break;
    case Coll::Reduce: {
      e.count = rank == 0 ? k.count : 0;
      e.chunk = k.count ? k.count : 1;
      float s = 0;
      for (int r = 0; r < n; ++r) s += input(r, 0);
      e.values = {s};
      break;
    }
    case Coll::AllToAll:
      e.count = k.count * n;
      e.chunk = k.count ? k.count : 1;
      for (int r = 0; r < n; ++r) e.values.push_back(input(r, rank));
      break;
    case Coll::SendRecv:
      e.count = k.count;
      e.chunk = k.count ? k.count : 1;
      e.values = {input((rank + n - 1) % n, 0)};
      break;
  }
  return e;
}

void prepare(Coll c, std::vector<Gpu>& gpus, int nranks, const TypeInfo& t, const Counts& k,
             bool in_place) {
  (void)nranks;
  for (Gpu& g : gpus) {
    int r = g.rank;
    CUDA_OK(cudaSetDevice(g.dev));
    size_t chunk = (c == Coll::AllToAll || c == Coll::ReduceScatter) ? k.count : k.send;
    if (chunk == 0) chunk = 1;
    if (in_place && c == Coll::AllGather) {
      // The rank's input sits in its own slot of the output.
      by_type(t.type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        T* p = static_cast<T*>(g.send) + r * k.count;
        fill<T><<<128, 256, 0, g.stream>>>(p, k.count, k.count ? k.count : 1, float(r + 1));
      });
    } else {
      by_type(t.type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        fill<T><<<128, 256, 0, g.stream>>>(static_cast<T*>(g.send), k.send, chunk, float(r + 1));
      });
    }
    CUDA_OK(cudaGetLastError());
  }
}

long long verify(Coll c, std::vector<Gpu>& gpus, int n, const TypeInfo& t, const Counts& k,
                 bool in_place) {
  long long wrong = 0;
  for (Gpu& g : gpus) {
    int r = g.rank;
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamSynchronize(g.stream));
    Expect e = expectation(c, r, n, k, in_place);
    if (e.count == 0) continue;
    CUDA_OK(cudaMemcpy(g.expected, e.values.data(), e.values.size() * sizeof(float),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(g.wrong, 0, sizeof(unsigned long long)));
    // In place, the result is in the send buffer, except for AllToAll and SendRecv, which
    // always receive into their own buffer (nccl-tests prints N/A for their in-place check).
    bool p2p = c == Coll::AllToAll || c == Coll::SendRecv;
    const void* base = in_place && !p2p ? g.send : g.recv;
    by_type(t.type, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* p = static_cast<const T*>(base) + e.offset;
      count_wrong<T><<<128, 256, 0, g.stream>>>(p, e.count, e.chunk, g.expected,
                                                static_cast<int>(e.values.size()), g.wrong);
    });
    unsigned long long w = 0;
    CUDA_OK(cudaMemcpyAsync(&w, g.wrong, sizeof w, cudaMemcpyDeviceToHost, g.stream));
    CUDA_OK(cudaStreamSynchronize(g.stream));
    wrong += static_cast<long long>(w);
  }
  return wrong;
}

double time_calls(Coll c, std::vector<Gpu>& gpus, int n, const TypeInfo& t, const Counts& k,
                  bool in_place, int calls) {
  for (auto& g : gpus) {
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamSynchronize(g.stream));
  }
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    NCCL_OK(ncclGroupStart());
    for (Gpu& g : gpus) launch(c, g, g.rank, n, t, k, in_place);
    NCCL_OK(ncclGroupEnd());
  }
  for (auto& g : gpus) {
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamSynchronize(g.stream));
  }
  std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - start;
  return d.count() / calls;
}

struct Facts {
  double mem_bw_gbps = 0, h2d_gbps = 0, d2h_gbps = 0, launch_us = 0, launch_sync_us = 0;
};

// Single-GPU facts of device `dev`: memory bandwidth (a copy kernel, read + write), pinned
// host-to-device and device-to-host bandwidth, and kernel launch cost.
Facts measure_facts(int dev) {
  Facts f;
  CUDA_OK(cudaSetDevice(dev));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  const size_t bytes = 512u << 20;
  void *x, *y, *h;
  CUDA_OK(cudaMalloc(&x, bytes));
  CUDA_OK(cudaMalloc(&y, bytes));
  CUDA_OK(cudaMallocHost(&h, bytes));
  std::memset(h, 1, bytes);
  size_t n4 = bytes / sizeof(float4);
  float ms = 0;
  copy_kernel<<<1024, 512, 0, s>>>(static_cast<float4*>(x), static_cast<float4*>(y), n4);
  CUDA_OK(cudaEventRecord(a, s));
  for (int i = 0; i < 10; ++i)
    copy_kernel<<<1024, 512, 0, s>>>(static_cast<float4*>(x), static_cast<float4*>(y), n4);
  CUDA_OK(cudaEventRecord(b, s));
  CUDA_OK(cudaEventSynchronize(b));
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  f.mem_bw_gbps = 10.0 * 2 * bytes / (ms * 1e-3) / 1e9;
  for (int dir = 0; dir < 2; ++dir) {
    auto kind = dir == 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    void* dst = dir == 0 ? x : h;
    void* src = dir == 0 ? h : x;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CUDA_OK(cudaEventRecord(a, s));
    for (int i = 0; i < 5; ++i) CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaEventSynchronize(b));
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    (dir == 0 ? f.h2d_gbps : f.d2h_gbps) = 5.0 * bytes / (ms * 1e-3) / 1e9;
  }
  // Back-to-back launches (throughput), and launch + synchronize (round trip).
  const int launches = 20000;
  for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, s>>>();
  CUDA_OK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) empty_kernel<<<1, 1, 0, s>>>();
  CUDA_OK(cudaStreamSynchronize(s));
  std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
  f.launch_us = d.count() / launches;
  const int rounds = 2000;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    empty_kernel<<<1, 1, 0, s>>>();
    CUDA_OK(cudaStreamSynchronize(s));
  }
  d = std::chrono::steady_clock::now() - t0;
  f.launch_sync_us = d.count() / rounds;
  CUDA_OK(cudaFree(x));
  CUDA_OK(cudaFree(y));
  CUDA_OK(cudaFreeHost(h));
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  CUDA_OK(cudaStreamDestroy(s));
  return f;
}

// NCCL's unique id for communicator number `combo`, through a file in the output folder (which
// every process must share): rank 0 creates it and writes it whole (a rename), the others wait
// for it, up to two minutes.
ncclUniqueId share_unique_id(const std::string& dir, int combo, bool lead) {
  ncclUniqueId id;
  std::string path = dir + "/.nccl-unique-id." + std::to_string(combo);
  if (lead) {
    NCCL_OK(ncclGetUniqueId(&id));
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof id.internal);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) die(path + ": cannot write NCCL's unique id");
    return id;
  }
  for (int waited = 0;; waited += 50) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(id.internal, sizeof id.internal) && f.gcount() == sizeof id.internal) return id;
    if (waited > 120000)
      die(path + ": rank 0 wrote no NCCL unique id in 2 minutes (is -o on a filesystem every "
                 "process shares?)");
    usleep(50000);
  }
}

// One rank's line of nccl-tests' "Using devices" block.
struct RankInfo {
  char host[64];
  char name[64];
  int pid, device, bus;
};

// Every rank's line, through an all-gather on the communicator.
std::vector<RankInfo> gather_ranks(std::vector<Gpu>& gpus, int nranks, const char* host,
                                   const std::vector<cudaDeviceProp>& props) {
  static_assert(sizeof(RankInfo) * 1024 <= kScratch, "scratch too small");
  if (nranks > 1024) die("more than 1024 ranks");
  std::vector<RankInfo> all(nranks);
  NCCL_OK(ncclGroupStart());
  for (size_t i = 0; i < gpus.size(); ++i) {
    Gpu& g = gpus[i];
    RankInfo me{};
    std::snprintf(me.host, sizeof me.host, "%s", host);
    std::snprintf(me.name, sizeof me.name, "%s", props[i].name);
    me.pid = static_cast<int>(getpid());
    me.device = g.dev;
    me.bus = props[i].pciBusID;
    CUDA_OK(cudaSetDevice(g.dev));
    char* base = static_cast<char*>(g.scratch);
    CUDA_OK(cudaMemcpyAsync(base + g.rank * sizeof me, &me, sizeof me, cudaMemcpyHostToDevice,
                            g.stream));
    NCCL_OK(ncclAllGather(base + g.rank * sizeof me, base, sizeof me, ncclUint8, g.comm,
                          g.stream));
  }
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaSetDevice(gpus[0].dev));
  CUDA_OK(cudaMemcpyAsync(all.data(), gpus[0].scratch, nranks * sizeof(RankInfo),
                          cudaMemcpyDeviceToHost, gpus[0].stream));
  for (Gpu& g : gpus) {
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamSynchronize(g.stream));
  }
  return all;
}

// Sums `v` over the processes: each process's first rank contributes it, its others zero.
void sum_over_ranks(std::vector<Gpu>& gpus, double* v, int count) {
  std::vector<double> zero(count, 0.0);
  NCCL_OK(ncclGroupStart());
  for (size_t i = 0; i < gpus.size(); ++i) {
    Gpu& g = gpus[i];
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaMemcpyAsync(g.scratch, i == 0 ? v : zero.data(), count * sizeof(double),
                            cudaMemcpyHostToDevice, g.stream));
    NCCL_OK(ncclAllReduce(g.scratch, g.scratch, count, ncclFloat64, ncclSum, g.comm, g.stream));
  }
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaSetDevice(gpus[0].dev));
  CUDA_OK(cudaMemcpyAsync(v, gpus[0].scratch, count * sizeof(double), cudaMemcpyDeviceToHost,
                          gpus[0].stream));
  for (Gpu& g : gpus) {
    CUDA_OK(cudaSetDevice(g.dev));
    CUDA_OK(cudaStreamSynchronize(g.stream));
  }
}

void set_env_default(const char* key, const std::string& value) {
  if (!std::getenv(key)) setenv(key, value.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  World world = read_world();
  if (o.print_world) {
    std::string local = world.local >= 0 ? std::to_string(world.local)
                                         : "not given (the rank, modulo this node's GPUs)";
    std::printf("process %d of %d, local rank %s (from %s)\n", world.rank, world.size,
                local.c_str(), world.from.c_str());
    return 0;
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    // An installed NVIDIA kernel driver too old for this runtime is not "no GPU".
    bool driver = access("/proc/driver/nvidia/version", F_OK) == 0;
    if (e == cudaErrorInsufficientDriver && driver) {
      std::fprintf(stderr,
                   "collsim-bench: the NVIDIA driver here is older than CUDA runtime %d.%d needs; "
                   "rebuild against an older toolkit (make CUDA_HOME=... NCCL_HOME=...)\n",
                   CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
      return 1;
    }
    std::fprintf(stderr, "collsim-bench: no CUDA GPU on this machine (cudaGetDeviceCount: %s)\n",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 2;
  }
  // This process's GPUs: all of them alone, else -g (default 1) from local rank x -g.
  const bool multi = world.size > 1;
  int n = o.ngpus > 0 ? o.ngpus : (multi ? 1 : ndev);
  int local = world.local >= 0 ? world.local : world.rank % std::max(1, ndev / n);
  int first_dev = multi ? local * n : 0;
  if (first_dev + n > ndev)
    die("-g " + std::to_string(n) + " from device " + std::to_string(first_dev) + ": only " +
        std::to_string(ndev) + " GPU(s) here");
  if (n > 64) die("-g " + std::to_string(n) + ": at most 64 GPUs in one process");
  const int nranks = n * world.size;  // the communicator's ranks; this process has n of them
  const int rank0 = n * world.rank;   // global rank of this process's first GPU
  const bool lead = world.rank == 0;  // writes the results
  mkdir(o.out.c_str(), 0755);

  // NCCL's own view of the machine, written when the first communicator is built.
  set_env_default("NCCL_TOPO_DUMP_FILE", o.out + "/nccl_topo.xml");
  set_env_default("NCCL_GRAPH_DUMP_FILE", o.out + "/nccl_graph.xml");
  set_env_default("NCCL_DEBUG", "INFO");
  set_env_default("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,TUNING");
  set_env_default("NCCL_DEBUG_FILE", o.out + "/nccl_debug.%h.%p.log");

  int nccl_version = 0, driver = 0, runtime = 0;
  NCCL_OK(ncclGetVersion(&nccl_version));
  CUDA_OK(cudaDriverGetVersion(&driver));
  CUDA_OK(cudaRuntimeGetVersion(&runtime));
  std::vector<cudaDeviceProp> props(n);
  for (int d = 0; d < n; ++d) CUDA_OK(cudaGetDeviceProperties(&props[d], first_dev + d));
  Facts facts = measure_facts(first_dev);
  std::fprintf(stderr,
               "collsim-bench: GPU 0 %s: memory %.1f GB/s, H2D %.1f GB/s, D2H %.1f GB/s, launch "
               "%.2f us (%.2f us with sync)\n",
               props[0].name, facts.mem_bw_gbps, facts.h2d_gbps, facts.d2h_gbps, facts.launch_us,
               facts.launch_sync_us);

  std::ostringstream env;
  env << "{\n  \"gpus\": [";
  for (int d = 0; d < n; ++d) {
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", props[d].pciDomainID, props[d].pciBusID,
                  props[d].pciDeviceID);
    env << (d ? ", " : "") << "{\"name\": \"" << json_escape(props[d].name)
        << "\", \"sm\": " << props[d].major * 10 + props[d].minor
        << ", \"memory_bytes\": " << props[d].totalGlobalMem << ", \"bus_id\": \"" << bus
        << "\"}";
  }
  env << "],\n  \"cuda_driver\": " << driver << ",\n  \"cuda_runtime\": " << runtime
      << ",\n  \"nccl_version\": " << nccl_version << ",\n  \"facts\": {\"device\": 0, "
      << "\"memory_bandwidth_gbps\": " << facts.mem_bw_gbps << ", \"h2d_gbps\": " << facts.h2d_gbps
      << ", \"d2h_gbps\": " << facts.d2h_gbps << ", \"launch_us\": " << facts.launch_us
      << ", \"launch_sync_us\": " << facts.launch_sync_us << "},\n  \"nvidia_smi_topo\": \""
      << json_escape(run_command("nvidia-smi topo -m 2>&1")) << "\",\n  \"nvidia_smi\": \""
      << json_escape(run_command("nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,"
                                 "pcie.link.width.max --format=csv 2>&1"))
      << "\"\n}\n";
  if (lead) std::ofstream(o.out + "/env.json") << env.str();
  if (o.facts_only) return 0;

  // Results go to rank 0's files; the other processes write to nowhere.
  std::ofstream text(lead ? o.out + "/results.txt" : "/dev/null");
  std::ostringstream json;
  char host[256] = "host";
  gethostname(host, sizeof host);
  // nccl-tests' -J layout (version, nccl_version, config, devices, results with out_of_place /
  // in_place {time, alg_bw, bus_bw, nwrong}), each result also naming its collective and the
  // forced algorithm and protocol.
  json << "{\n  \"version\": \"collsim-bench 1\",\n  \"nccl_version\": " << nccl_version
       << ",\n  \"config\": {\"nthreads\": 1, \"ngpus\": " << n << ", \"processes\": " << world.size
       << ", \"minimum_bytes\": " << o.min_bytes << ", \"maximum_bytes\": " << o.max_bytes
       << ", \"step_factor\": " << o.factor << ", \"warmup_iters\": " << o.warmup
       << ", \"iterations\": " << o.iters << ", \"aggregated_iterations\": 1"
       << ", \"validation\": " << (o.check ? 1 : 0) << ", \"graph\": 0},\n  \"devices\": [";
  // Every rank's line (host, pid, device), gathered once the first communicator exists.
  std::vector<RankInfo> ranks;
  size_t devices_at = json.str().size();
  json << "],\n  \"results\": [";
  bool first_row = true;
  int combo = 0;

  for (const auto& algo : o.algos) {
    for (const auto& proto : o.protos) {
      // NCCL reads NCCL_ALGO/NCCL_PROTO when a communicator is built: one per combination.
      if (algo == "default") unsetenv("NCCL_ALGO");
      else setenv("NCCL_ALGO", algo.c_str(), 1);
      if (proto == "default") unsetenv("NCCL_PROTO");
      else setenv("NCCL_PROTO", proto.c_str(), 1);
      std::vector<ncclComm_t> comms(n);
      if (!multi) {
        std::vector<int> devs(n);
        for (int d = 0; d < n; ++d) devs[d] = d;
        NCCL_OK(ncclCommInitAll(comms.data(), n, devs.data()));
      } else {
        ncclUniqueId id = share_unique_id(o.out, combo, lead);
        NCCL_OK(ncclGroupStart());
        for (int d = 0; d < n; ++d) {
          CUDA_OK(cudaSetDevice(first_dev + d));
          NCCL_OK(ncclCommInitRank(&comms[d], nranks, id, rank0 + d));
        }
        NCCL_OK(ncclGroupEnd());
        // Every rank has joined, so the id is read: no stale id for a later run to pick up.
        if (lead) std::remove((o.out + "/.nccl-unique-id." + std::to_string(combo)).c_str());
      }
      ++combo;
      std::vector<Gpu> gpus(n);
      size_t max_elems_bytes = o.max_bytes;
      for (int d = 0; d < n; ++d) {
        Gpu& g = gpus[d];
        g.dev = first_dev + d;
        g.rank = rank0 + d;
        g.comm = comms[d];
        CUDA_OK(cudaSetDevice(g.dev));
        CUDA_OK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc(&g.send, max_elems_bytes + 64));
        CUDA_OK(cudaMalloc(&g.recv, max_elems_bytes + 64));
        CUDA_OK(cudaMalloc(&g.expected, 64 * sizeof(float)));
        CUDA_OK(cudaMalloc(&g.wrong, sizeof(unsigned long long)));
        CUDA_OK(cudaMalloc(&g.scratch, kScratch));
      }
      if (ranks.empty()) {
        ranks = gather_ranks(gpus, nranks, host, props);
        std::ostringstream dev;
        for (int r = 0; r < nranks; ++r)
          dev << (r ? ", " : "") << "{\"rank\": " << r << ", \"group\": 0, \"pid\": "
              << ranks[r].pid << ", \"hostname\": \"" << json_escape(ranks[r].host)
              << "\", \"device\": " << ranks[r].device << ", \"device_info\": \""
              << json_escape(ranks[r].name) << "\"}";
        std::string head = json.str();
        head.insert(devices_at, dev.str());
        json.str(head);
        json.seekp(0, std::ios_base::end);
      }
      for (const CollInfo* ci : o.colls) {
        for (const TypeInfo* ti : o.types) {
          text << "# Collective test starting: " << ci->name << "_perf\n";
          text << "# nThread 1 nGpus " << n << " minBytes " << o.min_bytes << " maxBytes "
               << o.max_bytes << " step: " << o.factor << "(factor) warmup iters: " << o.warmup
               << " iters: " << o.iters << " agg iters: 1 validation: " << (o.check ? 1 : 0)
               << " graph: 0\n#\n";
          text << "# NCCL_ALGO=" << algo << " NCCL_PROTO=" << proto << " (collsim-bench)\n";
          text << "# Using devices\n";
          for (int r = 0; r < nranks; ++r) {
            char line[256];
            std::snprintf(line, sizeof line,
                          "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0x%02x] %s\n", r,
                          ranks[r].pid, ranks[r].host, ranks[r].device, ranks[r].bus,
                          ranks[r].name);
            text << line;
          }
          text << "#\n#                                                              out-of-place"
                  "                       in-place          \n"
                  "#       size         count      type   redop    root     time   algbw   busbw"
                  " #wrong     time   algbw   busbw #wrong\n"
                  "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
                  "            (us)  (GB/s)  (GB/s)       \n";
          double bw_sum = 0;
          int bw_rows = 0;
          long long wrong_total = 0;
          bool reduces = ci->coll == Coll::AllReduce || ci->coll == Coll::ReduceScatter ||
                         ci->coll == Coll::Reduce;
          bool rooted = ci->coll == Coll::Broadcast || ci->coll == Coll::Reduce;
          for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
            Counts k = counts(ci->coll, bytes, ti->size, nranks);
            if (k.count == 0) continue;
            Row row{ci->name, ti->name, reduces ? "sum" : "none", algo, proto, k.size,
                    k.count,  rooted ? 0 : -1, 0, 0, 0, 0, 0, 0, -1, -1};
            for (int ip = 0; ip < 2; ++ip) {
              bool in_place = ip == 1;
              prepare(ci->coll, gpus, nranks, *ti, k, in_place);
              double us;
              long long wrong = -1;
              if (o.check) {
                time_calls(ci->coll, gpus, nranks, *ti, k, in_place, 1);
                wrong = verify(ci->coll, gpus, nranks, *ti, k, in_place);
              }
              if (o.warmup > 0) time_calls(ci->coll, gpus, nranks, *ti, k, in_place, o.warmup);
              us = time_calls(ci->coll, gpus, nranks, *ti, k, in_place, o.iters);
              if (multi) {
                // As nccl-tests: the time averaged over the processes, the wrong values summed.
                double v[2] = {us, static_cast<double>(wrong)};
                sum_over_ranks(gpus, v, 2);
                us = v[0] / world.size;
                wrong = o.check ? static_cast<long long>(v[1]) : -1;
              }
              double algbw = static_cast<double>(k.size) / us / 1e3;
              double busbw = algbw * busbw_factor(ci->coll, nranks);
              (in_place ? row.ip_us : row.oop_us) = us;
              (in_place ? row.ip_algbw : row.oop_algbw) = algbw;
              (in_place ? row.ip_busbw : row.oop_busbw) = busbw;
              (in_place ? row.ip_wrong : row.oop_wrong) = wrong;
              if (wrong > 0) wrong_total += wrong;
            }
            bw_sum += row.oop_busbw;
            ++bw_rows;
            char line[512];
            auto wrong_s = [](long long w) { return w < 0 ? std::string("N/A") : std::to_string(w); };
            std::snprintf(line, sizeof line,
                          "%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %5s  %7.2f  %6.2f  "
                          "%6.2f  %5s\n",
                          row.size, row.count, row.dtype.c_str(), row.redop.c_str(), row.root,
                          row.oop_us, row.oop_algbw, row.oop_busbw, wrong_s(row.oop_wrong).c_str(),
                          row.ip_us, row.ip_algbw, row.ip_busbw, wrong_s(row.ip_wrong).c_str());
            text << line;
            text.flush();
            if (lead) {
              std::fputs(line, stdout);
              std::fflush(stdout);
            }
            auto nwrong = [](long long w) {
              return w < 0 ? std::string("\"N/A\"") : std::to_string(w);
            };
            json << (first_row ? "\n" : ",\n") << "    {\"collective\": \"" << row.coll
                 << "\", \"algo\": \"" << row.algo << "\", \"proto\": \"" << row.proto
                 << "\", \"size\": " << row.size << ", \"count\": " << row.count
                 << ", \"type\": \"" << row.dtype << "\", \"redop\": \"" << row.redop
                 << "\", \"root\": " << row.root << ", \"out_of_place\": {\"time\": "
                 << row.oop_us << ", \"alg_bw\": " << row.oop_algbw
                 << ", \"bus_bw\": " << row.oop_busbw << ", \"nwrong\": " << nwrong(row.oop_wrong)
                 << "}, \"in_place\": {\"time\": " << row.ip_us << ", \"alg_bw\": "
                 << row.ip_algbw << ", \"bus_bw\": " << row.ip_busbw
                 << ", \"nwrong\": " << nwrong(row.ip_wrong) << "}}";
            first_row = false;
            if (bytes > o.max_bytes / o.factor) break;
          }
          text << "# Out of bounds values : " << wrong_total << (wrong_total ? " FAILED" : " OK")
               << "\n# Avg bus bandwidth    : " << (bw_rows ? bw_sum / bw_rows : 0.0)
               << " \n#\n# Collective test concluded: " << ci->name << "_perf\n#\n";
          if (wrong_total && lead) std::fprintf(stderr, "collsim-bench: %s %s: %lld wrong values\n",
                                        ci->name, ti->name, wrong_total);
        }
      }
      for (auto& g : gpus) {
        CUDA_OK(cudaSetDevice(g.dev));
        CUDA_OK(cudaFree(g.send));
        CUDA_OK(cudaFree(g.recv));
        CUDA_OK(cudaFree(g.expected));
        CUDA_OK(cudaFree(g.wrong));
        CUDA_OK(cudaFree(g.scratch));
        CUDA_OK(cudaStreamDestroy(g.stream));
        NCCL_OK(ncclCommDestroy(g.comm));
      }
    }
  }
  json << "\n  ]\n}\n";
  if (!lead) return 0;
  std::ofstream(o.out + "/results.json") << json.str();
  std::fprintf(stderr, "collsim-bench: wrote %s/results.txt, results.json, env.json\n",
               o.out.c_str());
  return 0;
}
