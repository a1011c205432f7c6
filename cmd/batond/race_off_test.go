//go:build !race

package main_test

// rssFactor scales the RSS bounds of the tests (see race_on_test.go).
const rssFactor = 1
