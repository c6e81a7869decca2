# How tests/it/selection.rs's table was derived: NCCL 2.26's AllReduce cost model written out
# from shared/reference/nccl-model.md, independently of collsim's Rust code. Run: python3 this.py
# Independent derivation of NCCL 2.26's AllReduce choice (nccl-model.md §2.2-2.6, 2.23-2.27 column
# of §2.10) for DGX-A100 / DGX-H100 at 1 and 16 nodes, 8 B .. 8 GiB.
import math
BASE={'TREE':(6.8,14.0,8.4),'RING':(6.6,14.0,8.4),'NVLS':(0,0,0),'NVLS_TREE':(0,0,0)}
HW={'NVL':{'TREE':(0.6,1.25,4.0),'RING':(0.6,1.9,3.4),'NVLS':(0,0,25.0),'NVLS_TREE':(0,0,25.0)},
    'NET':{'TREE':(5.0,8.5,14.0),'RING':(2.7,4.0,14.0),'NVLS':(0,0,18.0),'NVLS_TREE':(0,0,14.0)}}
LLMAX={('amp',1):87.7,('hop',1):141.0,('amd',16):19.0,('intel',16):20.4}
RING_LL128={'amp':20.0,'hop':36.7}
TREE_MAX={('amp',1):24.0,('amp',16):17.8,('hop',1):38.7,('hop',16):36.0}
TREE_LL128={('amp',1):20.0,('amp',16):20.0,('hop',1):36.7,('hop',16):29.0}
CORR=[[1.0,1.0,1.0,1.0,0.9,0.8,0.7,0.7,0.7,0.7,0.6,0.5,0.4,0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.0,1.0,1.0],
      [1.0,1.0,1.0,1.0,1.0,0.9,0.8,0.8,0.8,0.7,0.6,0.6,0.6,0.6,0.6,0.6,0.8,0.9,0.9,0.9,0.9,1.0,1.0],
      [0.9,0.9,0.9,0.9,0.9,0.9,0.9,0.8,0.7,0.6,0.6,0.5,0.5,0.5,0.5,0.6,0.7,0.8,0.7,0.7,0.8,0.9,0.9]]
def table(arch, nodes):
    cpu='amd' if arch=='amp' else 'intel'
    ppn=8; n=ppn*nodes
    if arch=='amp':
        ring=(12,20.0) if nodes==1 else (8,24.0); nvls=None; cuda=24 if nodes==1 else 16
    else:
        ring=(12,30.0) if nodes==1 else (8,48.0); nvls=(8,40.0,60.0) if nodes==1 else (8,40.0,48.0); cuda=24 if nodes==1 else 32
    llmax=LLMAX[(arch,1)] if nodes==1 else LLMAX[(cpu,16)]
    out={}
    nsteps=2*(n-1)
    for algo in ['TREE','RING','NVLS','NVLS_TREE']:
        for pi,proto in enumerate(['LL','LL128','SIMPLE']):
            intra=HW['NVL'][algo][pi]; inter=HW['NET'][algo][pi]
            if algo in ('TREE','RING'):
                nch,bw=ring; bus=nch*bw
                if algo=='RING':
                    if proto=='LL': bus=min(llmax,0.5*bus)
                    elif proto=='LL128': bus=min(0.92*bus, nch*RING_LL128[arch])
                    alg=bus*n/nsteps
                    lat=BASE[algo][pi]
                    ninter=0 if nodes==1 else 2*(nodes-1)
                    netov=0 if nodes==1 else ((2.0 if cpu=='amd' else 1.0)*(3 if proto=='SIMPLE' else 1))
                    lat+=(nsteps-ninter)*max(intra,netov)+ninter*inter
                else:
                    bus=min(0.92*bus, nch*TREE_MAX[(arch,nodes)])
                    if proto=='LL': bus=min(bus/3.8, llmax)
                    elif proto=='LL128': bus=min(bus*(7/9 if nodes==1 else 120/128), nch*TREE_LL128[(arch,nodes)])
                    alg=bus*0.5
                    lat=BASE[algo][pi]+2*((ppn-1)*intra+math.log2(nodes)*inter)
            else:
                if nvls is None or proto!='SIMPLE': continue
                if algo=='NVLS' and nodes>1: continue
                if algo=='NVLS_TREE' and nodes==1: continue
                nch,bi,be=nvls
                if algo=='NVLS': alg=nch*min(bi,be)*5/6; lat=intra
                else: alg=nch*min(bi, be if nodes<=2 else be/2)*5/6; lat=intra+2*math.log2(nodes)*inter
            out[(algo,proto)]=(lat,alg)
    res=[]
    for e in range(3,34):
        b=1<<e; best=None
        for (algo,proto),(lat,alg) in out.items():
            bw=alg
            if algo=='TREE':
                idx=int(math.log2(b//64)) if b>=64 else 0
                if idx<23: bw*=CORR[['LL','LL128','SIMPLE'].index(proto)][idx]
            l=lat
            if algo=='RING' and proto=='SIMPLE' and nodes>1 and b//(cuda*n)>=64: l*=1.4
            t=l+b/(1000*bw)
            if best is None or t<best[2]: best=(algo,proto,t)
        res.append((b,best[0],best[1]))
    return res
for arch,name in [('amp','dgx-a100'),('hop','dgx-h100')]:
    for nodes in (1,16):
        r=table(arch,nodes)
        print(f'("{name}", {nodes}, &[' + ', '.join(f'"{a}/{p}"' for _,a,p in r) + ']),')
