package main

import "github.com/sluice-dev/sluice/internal/demo"

func init() { register(demo.Command()) }
