#!/usr/bin/env bash
# sidebyside.sh: compare the benchmarks of two commits by turns, on one
# machine in one stretch of time, so that a shared machine's drifting load
# falls on both alike (run one after the other, the same benchmark moves by
# up to 2x here).
#
#   scripts/sidebyside.sh OLD NEW REGEX [ROUNDS] [BENCHTIME] [PKG]
#
# It builds the test binary of PKG (default: the root package) at each
# commit (git worktrees in a temporary directory), then runs
# `-test.bench REGEX -test.benchtime BENCHTIME -test.count 1` ROUNDS times
# (default 6) for each, alternating which goes first, and prints benchstat's
# comparison of the two (golang.org/x/perf/cmd/benchstat), plus the load
# average before and after. BENCHTIME defaults to 1x per benchmark's own
# sizing, e.g. 5000x. The raw outputs stay in the directory it names.
set -euo pipefail
old=${1:?usage: sidebyside.sh OLD NEW REGEX [ROUNDS] [BENCHTIME] [PKG]}
new=${2:?}
regex=${3:?}
rounds=${4:-6}
benchtime=${5:-1s}
pkg=${6:-.}
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/sidebyside.XXXXXX)
cleanup() {
	for side in old new; do
		git -C "$top" worktree remove --force "$work/$side" >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT
for side in old new; do
	rev=$old
	[ "$side" = new ] && rev=$new
	git -C "$top" worktree add -q --detach "$work/$side" "$rev"
	(cd "$work/$side" && go test -c -o "$work/$side.test" "$pkg")
done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
	order="old new"
	[ $((r % 2)) = 0 ] && order="new old"
	for side in $order; do
		(cd "$work/$side/$pkg" && "$work/$side.test" -test.run '^$' -test.bench "$regex" \
			-test.benchtime "$benchtime" -test.count 1 -test.benchmem) >>"$work/$side.txt"
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da \
	"old=$work/old.txt" "new=$work/new.txt"
echo "raw outputs: $work/old.txt $work/new.txt"
trap - EXIT
cleanup
