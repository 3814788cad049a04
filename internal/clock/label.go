package clock

import (
	"fmt"
	"strconv"
	"time"
)

// Label names the app's clock where it differs from the wall clock, for
// the pages and outputs that show its times: "simulated time, ×720" for a
// clock of speed above 1; "simulated time, 2h 5m ahead of the wall clock"
// (or behind it) for one that runs as fast but elsewhere, by more than a
// minute; "" for the wall clock itself. now is the app's clock, wall the
// wall clock's at the same moment.
func Label(speed float64, now, wall time.Time) string {
	if speed > 1 {
		return "simulated time, ×" + strconv.FormatFloat(speed, 'g', -1, 64)
	}
	d := now.Sub(wall)
	where := "ahead of"
	if d < 0 {
		d, where = -d, "behind"
	}
	if d <= time.Minute {
		return ""
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("simulated time, %dh %dm %s the wall clock", int(d.Hours()), int(d.Minutes())%60, where)
}
