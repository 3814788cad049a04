//go:build !race

package sluice_test

// raceOn: see race_on_test.go.
const raceOn = false
