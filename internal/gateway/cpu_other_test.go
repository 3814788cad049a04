//go:build !unix

package gateway

import "time"

// processCPU is not measured where rusage is not: 0.
func processCPU() time.Duration { return 0 }
