# Sourced at the start of a device call (GPU machine, repository root, `.whl` carried), and by
# tools/gpu_session.sh and tools/gpu_speed.sh themselves:
#   source tools/gpu_env.sh && python3 tools/probe_fit_gap.py --batch 16
# Installs the wheels of tools/gpu_wheels.sh into /tmp/site (the machine starts bare each time),
# then puts the workspace's sources, tools/ and /tmp/site on the path with the variables every
# GPU run of this project sets: cuBLAS' fixed workspace (bitwise parity), unbuffered output (a
# killed command still returns its log) and Ultralytics offline.
# A call brings back at most 8 files from $OUT, none deeper than $OUT/a/b/: a tool that writes
# more (tools/profile_startup.py writes about ten a run) goes under /tmp, and the call copies
# the few it needs to $OUT or packs them into one archive there.
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >/dev/null || { echo "gpu_env: installing .whl/ failed" >&2; return 1; }
fi
PYTHONPATH=$(ls -d "$PWD"/packages/*/src | paste -sd:):$PWD/tools:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1 YOLO_OFFLINE=1
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
