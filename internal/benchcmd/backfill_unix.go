//go:build unix

package benchcmd

import (
	"os"
	"runtime"
	"syscall"
)

// peakRSSMB is the peak resident memory of an exited process, in MB.
func peakRSSMB(ps *os.ProcessState) float64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return float64(ru.Maxrss) / (1 << 20) // bytes
	}
	return float64(ru.Maxrss) / (1 << 10) // KiB
}
