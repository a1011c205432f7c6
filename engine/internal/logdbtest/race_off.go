//go:build !race

package logdbtest

const raceEnabled = false
