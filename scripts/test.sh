#!/usr/bin/env bash
# README's test command: the whole suite, as shards run side by side (tests/sharding.py), each
# line prefixed with its shard. Exits non-zero when any shard fails. Arguments go to every
# shard's pytest (a folder, -x, -k ...). PYINFRA_SGLANG_TEST_SHARDS sets how many (default:
# one per CPU, at least 2 and at most 4); 1 runs plain pytest. Each shard's JUnit XML is
# written to results/tests/shard-K.xml (bench/suite_times.py reads them).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"

cpus=$(nproc 2>/dev/null || echo 2)
default=$((cpus < 2 ? 2 : (cpus > 4 ? 4 : cpus)))
shards=${PYINFRA_SGLANG_TEST_SHARDS:-$default}
# At most 16 (tests/sharding.py MAX_SHARDS): each shard boots hosts on a slice of its own.
if ! [[ $shards =~ ^[1-9][0-9]?$ ]] || [ "$shards" -gt 16 ]; then
    echo "PYINFRA_SGLANG_TEST_SHARDS=$shards: a whole number from 1 to 16" >&2
    exit 2
fi
if [ "$shards" -eq 1 ]; then
    exec uv run pytest "$@"
fi

# Install once, before the shards start side by side.
uv sync --locked --quiet || exit $?
mkdir -p results/tests
pids=()
for k in $(seq 1 "$shards"); do
    uv run --no-sync pytest --shard "$k/$shards" --junitxml "results/tests/shard-$k.xml" "$@" \
        > >(sed -u "s/^/[shard $k] /") 2>&1 &
    pids+=($!)
done

# Ctrl-C or a CI timeout stops every shard (each stops the test hosts it booted).
trap 'kill -INT "${pids[@]}" 2>/dev/null; wait' INT TERM

status=0
for k in $(seq 1 "$shards"); do
    wait "${pids[$((k - 1))]}"
    code=$?
    # pytest exits 5 when it collected nothing: a shard may get no module of a small selection.
    if [ "$code" -ne 0 ] && [ "$code" -ne 5 ]; then
        echo "shard $k/$shards failed (pytest exit $code)" >&2
        status=1
    fi
done
wait  # the output filters
exit "$status"
