//go:build race

package logdbtest

const raceEnabled = true
