"""Per-category predicted GPU time vs profiled kernel time of the traced train steps."""
import json
import glob
import sys
import collections
import re
import mechsim
from mechsim.validation.analysis.predict import train_workload
from mechsim.sim.estimate import estimate

DATA = '/work/main/validation/data/h200/'
CASES = ['train_step/125m/eager/mbs8_seq1024', 'train_step/1b/eager/mbs2_seq2048',
         'train_step/8b_l4/eager/mbs2_seq4096', 'train_step/1b/compile/mbs2_seq2048']

def kcat(name):
    n = name
    if n.startswith('Optimizer.step') or n.startswith('ProfilerStep'):
        return None
    if re.search(r'nvjet|cutlass|sm90_xmma|gemm|ampere_|sm80_', n) and 'sdpa' not in n:
        return 'matmul'
    if 'sdpa' in n and 'fprop' in n: return 'attn_fwd'
    if 'sdpa' in n and 'bprop' in n: return 'attn_bwd'
    if 'cudnn::fusion' in n: return 'attn_bwd'   # dot(dO,O), dq convert, GQA head reduce
    if 'FusedOptimizerTensorListMetadata' in n or 'fused_adam' in n.lower(): return 'optimizer'
    return 'memory'

def pcat(o):
    if o.kind == 'matmul':
        return 'matmul'
    if o.kind == 'attention':
        return 'attn_fwd' if o.phase == 'fwd' else 'attn_bwd'
    if o.kind == 'optimizer':
        return 'optimizer'
    return 'memory'

def mm_sub(o):
    return 'wgrad' if o.name.endswith('/wgrad') else 'dgrad' if o.name.endswith('/dgrad') else 'fwd'

def records():
    out = collections.defaultdict(list)
    for f in sorted(glob.glob(DATA + '*.json')):
        d = json.load(open(f))
        for r in d['records']:
            if r['case_id'] in CASES and r['kind'] == 'train_step' and (r.get('extra') or {}).get('kernels'):
                out[r['case_id']].append((f.split('/')[-1][:31], r))
    return out

def main(detail=False):
    print('# mechsim from', mechsim.__file__)
    for case, rs in records().items():
        p = rs[0][1]['params']
        e = estimate(train_workload(p), 'h200_sxm')
        pred = collections.Counter(); mm = collections.Counter()
        for o in e.ops:
            pred[pcat(o)] += o.time_s * 1e3
            if o.kind == 'matmul': mm[mm_sub(o)] += o.time_s * 1e3
        prof = collections.Counter(); cnt = collections.Counter(); nrun = 0
        meds = []; busys = []; ksum = []
        for _run, r in rs:
            ks = r['extra']['kernels']; nrun += 1
            s = 0
            for k in ks:
                c = kcat(k['name'])
                if c is None: continue
                prof[c] += k['total_us'] / 1e3; cnt[c] += k['count']; s += k['total_us'] / 1e3
            busy = r['extra']['device_busy_us'] / 1e3
            meds.append(r['timing']['median_s'] * 1e3); busys.append(busy); ksum.append(s)
        for c in prof: prof[c] /= nrun; cnt[c] /= nrun
        med = sorted(meds)[len(meds)//2]; busy = sum(busys)/nrun; top = sum(ksum)/nrun
        prof['other(tail)'] = 0.0
        print(f'\n## {case}  runs={nrun}  measured median {min(meds):.1f}-{max(meds):.1f} ms (med {med:.1f}); '
              f'device_busy {busy:.1f} ms; top-40 kernel sum {top:.1f} ms; predicted step {e.step_time_s*1e3:.1f} ms, '
              f'GPU busy {e.gpu_busy_s*1e3:.1f}, idle {e.launch_overhead_s*1e3:.1f}')
        print('| category | predicted GPU ms | profiled ms (top-40) | ratio pred/prof |')
        print('|---|---:|---:|---:|')
        for c in ['matmul', 'attn_fwd', 'attn_bwd', 'optimizer', 'memory']:
            print(f'| {c} | {pred[c]:.2f} | {prof[c]:.2f} | {pred[c]/prof[c] if prof[c] else float("nan"):.3f} |')
        tot_p = sum(pred.values()); tot_k = top
        print(f'| total (GPU) | {tot_p:.2f} | {tot_k:.2f} | {tot_p/tot_k:.3f} |')
        print('  matmul split predicted: ' + ', '.join(f'{k} {v:.2f}' for k, v in mm.items()))
        if detail:
            # matmul kernels per layout
            lay = collections.Counter(); lc = collections.Counter()
            for _run, r in rs:
                for k in r['extra']['kernels']:
                    if kcat(k['name']) == 'matmul':
                        key = k['name'][:60]
                        lay[key] += k['total_us'] / 1e3 / nrun; lc[key] += k['count'] / nrun
            for k in lay: print(f'    {k:60s} n={lc[k]:6.1f} {lay[k]:8.2f} ms')
    return

if __name__ == '__main__':
    main('-v' in sys.argv)
