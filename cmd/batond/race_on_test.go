//go:build race

package main_test

// rssFactor scales the RSS bounds of the tests: the harness builds batond
// with -race when the tests are, and the race detector's shadow memory
// about triples what a buffer costs.
const rssFactor = 3
