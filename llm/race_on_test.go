//go:build race

package llm

// raceOn: the race detector's instrumentation makes values escape to the
// heap that do not without it, so allocation counts are pinned only in a
// build without it (scripts/test.sh runs those tests so too).
const raceOn = true
