//! Each algorithm on 8, 512 and 16,384 DGX-H100 GPUs (auto mode, as the CLI runs; one
//! call, the communicator built beforehand), the sizes at the ends of the range at 16,384 GPUs,
//! the whole 31-size nccl-tests sweep on 2,048 nodes, and one 1 GiB AllReduce on 131,072 GPUs
//! (16,384 nodes under a 3-tier fat-tree).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

use collsim::collective::{self, Call, Collective, Mode, TimingParams};
use collsim::comm::Communicator;
use collsim::comm::env::NcclEnv;
use collsim::config::{DEFAULT_PROFILE, parse_profile, resolve_topology};
use collsim::hw::Cluster;
use collsim::units::Bytes;
use collsim::workload::sweep::{SweepSpec, run};
use collsim::workload::{DataType, ReduceOp};

/// One call of `coll` on `bytes` as the sweep would make it, aggregated.
fn call<'a>(
    cluster: &'a Cluster,
    comm: &'a Communicator,
    coll: Collective,
    bytes: u64,
    params: &'a TimingParams,
) -> Call<'a> {
    Call {
        cluster,
        comm,
        coll,
        bytes: Bytes::new(bytes),
        elt: Bytes::new(4),
        sel: collective::select(comm, coll, bytes),
        params,
        mode: Mode::Auto,
        load: &[],
    }
}

/// Group name, collective, NCCL_ALGO, (nodes, GPUs per node) shapes, SHARP switches.
type Case<'a> = (&'a str, Collective, &'a str, &'a [(usize, usize)], bool);

fn bench(c: &mut Criterion) {
    let (_, spec) = resolve_topology("dgx-h100", None).expect("preset");
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let bytes = 256u64 << 20;
    let mut sharp = spec.clone();
    sharp.network.sharp = true;
    // Nodes × GPUs per node for 8, 512 and 16,384 GPUs; algorithms that need several nodes
    // (NVLSTree, CollNet) take 8 GPUs as 2 × 4, PAT (one GPU per node) as 8 × 1.
    let full: &[(usize, usize)] = &[(1, 8), (64, 8), (2048, 8)];
    let multi: &[(usize, usize)] = &[(2, 4), (64, 8), (2048, 8)];
    let single: &[(usize, usize)] = &[(8, 1), (512, 1), (16_384, 1)];
    let cases: [Case; 11] = [
        (
            "ring_allreduce_256MiB",
            Collective::AllReduce,
            "Ring",
            &[(1, 8), (8, 8), (64, 8), (512, 8), (2048, 8)],
            false,
        ),
        ("tree_allreduce_256MiB", Collective::AllReduce, "Tree", full, false),
        ("nvls_allreduce_256MiB", Collective::AllReduce, "NVLS", &[(1, 8)], false),
        ("nvlstree_allreduce_256MiB", Collective::AllReduce, "NVLSTree", multi, false),
        ("collnet_direct_allreduce_256MiB", Collective::AllReduce, "CollNetDirect", multi, true),
        ("collnet_chain_allreduce_256MiB", Collective::AllReduce, "CollNetChain", multi, true),
        ("ring_allgather_256MiB", Collective::AllGather, "Ring", full, false),
        ("ring_reducescatter_256MiB", Collective::ReduceScatter, "Ring", full, false),
        ("pat_allgather_256MiB", Collective::AllGather, "PAT", single, false),
        ("ring_broadcast_256MiB", Collective::Broadcast, "Ring", full, false),
        ("ring_reduce_256MiB", Collective::Reduce, "Ring", full, false),
    ];
    for (name, coll, algo, shapes, with_sharp) in cases {
        let mut g = c.benchmark_group(name);
        g.sample_size(10);
        for &(nodes, gpn) in shapes {
            let gpus = nodes * gpn;
            let cluster = Cluster::new(if with_sharp { &sharp } else { &spec }, nodes, gpn);
            let env = NcclEnv::from_pairs([("NCCL_ALGO", algo), ("NCCL_COLLNET_ENABLE", "1")])
                .expect("env");
            let comm = Communicator::new(&cluster, &env).expect("communicator");
            comm.check_algos(coll).expect("the algorithm runs here");
            let call = call(&cluster, &comm, coll, bytes, &params);
            g.throughput(Throughput::Elements(gpus as u64));
            g.bench_with_input(BenchmarkId::from_parameter(gpus), &gpus, |b, _| {
                b.iter(|| collective::simulate(&call))
            });
        }
        g.finish();
    }
    // SendRecv: each rank to the next.
    let mut g = c.benchmark_group("p2p_sendrecv_256MiB");
    g.sample_size(10);
    for &(nodes, gpn) in full {
        let gpus = nodes * gpn;
        let cluster = Cluster::new(&spec, nodes, gpn);
        let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
        g.bench_with_input(BenchmarkId::from_parameter(gpus), &gpus, |b, _| {
            let call = call(&cluster, &comm, Collective::SendRecv, bytes, &params);
            b.iter(|| collective::simulate(&call))
        });
    }
    g.finish();
    // Point-to-point: every pair of ranks (n² of them; on a uniform network node 0's pairs stand
    // for all from 3 nodes up).
    let mut g = c.benchmark_group("p2p_alltoall_256MiB");
    g.sample_size(10);
    for gpus in [8usize, 512, 16_384] {
        let cluster = Cluster::new(&spec, gpus / 8, 8);
        let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
        g.bench_with_input(BenchmarkId::from_parameter(gpus), &gpus, |b, _| {
            let call = call(&cluster, &comm, Collective::AllToAll, bytes, &params);
            b.iter(|| collective::simulate(&call))
        });
    }
    g.finish();
    // The smallest and largest sizes at 16,384 GPUs, NCCL's own choices (Tree/LL, NVLSTree).
    let mut g = c.benchmark_group("call_16384_gpus");
    g.sample_size(10);
    let cluster = Cluster::new(&spec, 2048, 8);
    let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
    for (name, bytes) in [("allreduce_8B", 8u64), ("allreduce_8GiB", 8 << 30)] {
        let call = call(&cluster, &comm, Collective::AllReduce, bytes, &params);
        g.bench_function(name, |b| b.iter(|| collective::simulate(&call)));
    }
    g.finish();
    // The whole default sweep, 8 B to 8 GiB, on 2,048 nodes, NCCL's own choices.
    let mut g = c.benchmark_group("sweep_31_sizes");
    g.sample_size(10);
    let sweep = SweepSpec {
        collective: Collective::AllReduce,
        min_bytes: Bytes::new(8),
        max_bytes: Bytes::from_gib(8),
        factor: 2,
        dtype: DataType::Float,
        op: ReduceOp::Sum,
        backend: Default::default(),
        barrier: false,
    };
    g.bench_function("2048_nodes", |b| {
        b.iter(|| run(&cluster, &comm, &sweep, &params, Mode::Auto).expect("sweep"))
    });
    g.finish();
    // 131,072 GPUs: 16,384 DGX-H100 nodes under a 3-tier fat-tree of 64-port switches.
    let mut g = c.benchmark_group("allreduce_1GiB_131072_gpus");
    g.sample_size(10);
    let mut ft = spec.clone();
    ft.network.fabric =
        collsim::hw::FabricKind::FatTree { tiers: 3, radix: 64, oversubscription: vec![1.0, 1.0] };
    let cluster = Cluster::new(&ft, 16_384, 8);
    let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
    let call = call(&cluster, &comm, Collective::AllReduce, 1 << 30, &params);
    g.bench_function("fat_tree_3_tiers", |b| b.iter(|| collective::simulate(&call)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
