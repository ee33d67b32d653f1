set -uo pipefail
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRACEKIT_CACHE=/tmp/tracekit-cache
IGNORE=(--ignore=tests/viz)
for f in $(grep -l -E "^(from tracekit\.viz|import dash|from dash)" tests/*.py tests/*/*.py 2>/dev/null); do IGNORE+=("--ignore=$f"); done
# the 0.5B synthetic file, written while the tests run (host quantization, tens of seconds)
(python3 -c "import sys; sys.path.insert(0,'scripts'); from decode_speed import resolve; print(resolve('qwen2-0.5b'))" > /tmp/q05.log 2>&1) &
echo "=== gpu tests $(date -u +%T)"
timeout -k 5 230 python3 -m pytest -q -m gpu -n 8 -rfEX --timeout 150 "${IGNORE[@]}" tests > $OUT/gpu-tests.log 2>&1
grep -E "^(FAILED|ERROR|XPASS)" $OUT/gpu-tests.log | cut -c1-250 | head -30; tail -1 $OUT/gpu-tests.log
wait
echo "=== bound report $(date -u +%T)"
timeout -k 5 100 python3 scripts/bound_report.py --backend cupy --steps 4 --out $OUT qwen2-0.5b > $OUT/bound-report.log 2>&1; echo rc=$?; tail -60 $OUT/bound-report.log | cut -c1-200
echo "=== overhead $(date -u +%T)"
timeout -k 5 100 python3 scripts/capture_overhead.py --backend cupy --steps 24 demo qwen2-0.5b > $OUT/overhead.log 2>&1; tail -12 $OUT/overhead.log
echo "=== matvec bench $(date -u +%T)"
timeout -k 5 60 python3 scripts/bench_matvec.py --shapes 14336x4096 --nt 1 > $OUT/bench_matvec.log 2>&1; tail -22 $OUT/bench_matvec.log
echo "=== end $(date -u +%T)"
