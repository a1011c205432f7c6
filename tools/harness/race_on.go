//go:build race

package harness

// raceEnabled reports whether this binary was built with -race.
const raceEnabled = true
