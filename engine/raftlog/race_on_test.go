//go:build race

package raftlog

const raceEnabled = true
