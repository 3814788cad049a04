//go:build !race

package llm

const raceOn = false
