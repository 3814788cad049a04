//go:build !unix

package benchcmd

import "os"

// peakRSSMB is not measured where rusage is not: 0.
func peakRSSMB(*os.ProcessState) float64 { return 0 }
