# Shared by tools/bench-*.sh (sourced, not run): checks, the build, a work
# dir removed on exit, and the median of a column of numbers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v jq >/dev/null || { echo "$0 needs jq (apt-get install jq)"; exit 1; }
make -s build
work=$(mktemp -d)

# median reads numbers, one per line, and prints their median.
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "go: $(go version)"
