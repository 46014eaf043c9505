# Sourced by the device scripts once they have set OUT: the time budget and the step log.
# The whole script fits in BUDGET seconds (the device tool allows 600 per command): a step
# run under `timeout "$(lim N)"` gets at most N seconds and never more than what is left.
BUDGET=${BUDGET:-540}
DEADLINE=$((SECONDS + BUDGET))
lim() { local left=$((DEADLINE - SECONDS - 5)); [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"; }
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
step() { printf '\n==> %s (%s)\n' "$1" "$(date +%T)"; }
note() { echo "$1" | tee -a "$SUMMARY"; }
