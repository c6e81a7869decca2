//! Each algorithm on 8, 512 and 16,384 DGX-H100 GPUs (aggregated mode, as the CLI runs), and
//! a whole 31-size nccl-tests sweep on 128 nodes.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

use collsim::collective::{Collective, Mode, p2p};
use collsim::comm::Communicator;
use collsim::comm::env::NcclEnv;
use collsim::config::{DEFAULT_PROFILE, SweepSpec, parse_profile, resolve_topology};
use collsim::hw::Cluster;
use collsim::units::Bytes;
use collsim::workload::sweep::{run, simulate_call};
use collsim::workload::{DataType, ReduceOp};

fn bench(c: &mut Criterion) {
    let (_, spec) = resolve_topology("dgx-h100", None).expect("preset");
    let params = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).expect("profile");
    let bytes = 256u64 << 20;
    // (group, collective, NCCL_ALGO, GPU counts)
    let cases: [(&str, Collective, &str, &[usize]); 6] = [
        ("ring_allreduce_256MiB", Collective::AllReduce, "Ring", &[8, 64, 512, 4096, 16_384]),
        ("tree_allreduce_256MiB", Collective::AllReduce, "Tree", &[8, 512, 16_384]),
        ("nvls_allreduce_256MiB", Collective::AllReduce, "NVLS", &[8]),
        ("nvlstree_allreduce_256MiB", Collective::AllReduce, "NVLSTree", &[512, 16_384]),
        ("ring_allgather_256MiB", Collective::AllGather, "Ring", &[8, 512, 16_384]),
        ("ring_broadcast_256MiB", Collective::Broadcast, "Ring", &[8, 512, 16_384]),
    ];
    for (name, coll, algo, sizes) in cases {
        let mut g = c.benchmark_group(name);
        g.sample_size(10);
        for &gpus in sizes {
            let cluster = Cluster::new(&spec, gpus / 8, 8);
            let env = NcclEnv::from_pairs([("NCCL_ALGO", algo)]).expect("env");
            let comm = Communicator::new(&cluster, &env).expect("communicator");
            let sel = comm.select(coll, bytes);
            g.throughput(Throughput::Elements(gpus as u64));
            g.bench_with_input(BenchmarkId::from_parameter(gpus), &gpus, |b, _| {
                b.iter(|| {
                    simulate_call(&cluster, &comm, coll, bytes, 4, &sel, &params, Mode::Aggregated)
                })
            });
        }
        g.finish();
    }
    // Point-to-point: every pair of ranks, so AllToAll grows as n²; 512 GPUs is its scale here.
    let mut g = c.benchmark_group("p2p_alltoall_256MiB");
    g.sample_size(10);
    for gpus in [8usize, 512] {
        let cluster = Cluster::new(&spec, gpus / 8, 8);
        let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
        g.bench_with_input(BenchmarkId::from_parameter(gpus), &gpus, |b, _| {
            b.iter(|| p2p::simulate(Collective::AllToAll, &cluster, &comm, bytes, &params))
        });
    }
    g.finish();
    // The whole default sweep, 8 B to 8 GiB, on 128 nodes, NCCL's own choices.
    let mut g = c.benchmark_group("sweep_31_sizes");
    g.sample_size(10);
    let cluster = Cluster::new(&spec, 128, 8);
    let comm = Communicator::new(&cluster, &NcclEnv::default()).expect("communicator");
    let sweep = SweepSpec {
        collective: Collective::AllReduce,
        min_bytes: Bytes::new(8),
        max_bytes: Bytes::from_gib(8),
        factor: 2,
        dtype: DataType::Float,
        op: ReduceOp::Sum,
    };
    g.bench_function("128_nodes", |b| {
        b.iter(|| run(&cluster, &comm, &sweep, &params, Mode::Aggregated).expect("sweep"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
