//go:build race

package sluice_test

// raceOn: the race detector slows every goroutine several times, and the
// tests that run minutes of a bubble's clock shorten what they run.
const raceOn = true
