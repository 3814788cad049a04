package main

// buildStamp marks a build of sluice, set with
// go build -ldflags "-X main.buildStamp=…". It changes nothing but the
// binary: bench crash --upgrade builds sluice several times with different
// stamps, so that every restart runs a binary of its own, and each worker
// prints its stamp for the bench to check which build runs.
var buildStamp string
