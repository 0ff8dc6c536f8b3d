#!/usr/bin/env bash
# Whether the kernels of two revisions are the same code, without a GPU or cuobjdump: compiles the
# CUDA sources of the library that hold the GEMM role (gemm_hopper.cu, gemm_rs.cu, ag_gemm.cu) of REV
# and of the working tree to PTX and compares every kernel entry, ignoring line info, comments and
# the numbering of labels and call sequences. A kernel whose mangled name gained a trailing `false`
# template argument (a new default, e.g. PROMOTE) or a trailing `256` (the tile's columns, TBN) is
# matched to its old name. Prints per file: identical, differing, new kernels.
# Usage: scripts/ptx_same.sh REV   (needs nvcc; takes about a minute)
set -euo pipefail
rev=${1:?usage: scripts/ptx_same.sh REV}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q "$tmp/old" "$rev"
nvcc=${CUDACXX:-nvcc}
flags="-arch=sm_90a -lineinfo --expt-relaxed-constexpr -O3 -DNDEBUG -DWEAVE_HAVE_CUDA=1"
# weave_config.h and friends come from a configured build tree; the guard header stands in for NCCL
inc() { echo "-I$1/cmake/guard/no_nccl -I$1/include -I$root/build/include -I$1/src"; }
for src in src/gemm/hopper/gemm_hopper.cu src/kernels/gemm_rs.cu src/kernels/ag_gemm.cu; do
  b=$(basename "$src" .cu)
  $nvcc $flags $(inc "$tmp/old") -ptx "$tmp/old/$src" -o "$tmp/old_$b.ptx" 2>/dev/null &
  $nvcc $flags $(inc "$root") -ptx "$root/$src" -o "$tmp/new_$b.ptx" 2>/dev/null &
done
wait
python3 - "$tmp" <<'PY'
import re, sys
tmp = sys.argv[1]
def kernels(path):
    out = {}
    for m in re.finditer(r'^\.visible \.entry (\S+)\(.*?^\}', open(path).read(), re.S | re.M):
        name, body = m.group(1), m.group(0).replace(m.group(1), 'FN')
        body = re.sub(r'\$L__BB\d+_', '$L__BB_', re.sub(r'callseq \d+', 'callseq', body))
        out[name] = '\n'.join(l for l in body.split('\n') if not l.strip().startswith(('.loc', '//', '.file')))
    return out
for b in ('gemm_hopper', 'gemm_rs', 'ag_gemm'):
    old, new = kernels(f'{tmp}/old_{b}.ptx'), kernels(f'{tmp}/new_{b}.ptx')
    same, differ, added = [], [], []
    for n, body in new.items():
        o = n if n in old else re.sub(r'Li256EEv' if 'Li256EEv' in n else r'Lb0EEv', 'Ev', n, count=1)
        (added if o not in old else same if old[o] == body else differ).append(n)
    print(f'{b}.cu: {len(same)} identical, {len(differ)} differ, {len(added)} new (of {len(new)}; {len(old)} before)')
    for n in differ: print(f'  differs: {n}')
    for n in added: print(f'  new: {n}')
PY
