package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/num"
)

const barWidth = 20

// Bar draws done out of done+remaining: "[#####...............]  25% 1/4";
// "-" for a flow with neither.
func Bar(done, remaining int64) string {
	total := done + remaining
	if done < 0 || remaining < 0 || total <= 0 {
		return "-"
	}
	frac := float64(done) / float64(total)
	n := int(frac * barWidth)
	return fmt.Sprintf("[%s%s] %3d%% %s/%s", strings.Repeat("#", n), strings.Repeat(".", barWidth-n),
		int(frac*100), num.Group(done), num.Group(total))
}

// Clip cuts s to n runes, on one line.
func Clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Span writes a duration the way a person reads one at a glance: 45s,
// 12m, 3h05m, 2d04h.
func Span(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
