// Package govtext reads and writes the words sluice's flags and
// configuration files use for a provider key's settings: its limits
// ("rpm=30,tpm=8000"), how it counts a period ("rolling" or "fixed") and
// what it keeps of a call's charge ("reserve" or "settle").
package govtext

import (
	"fmt"

	"github.com/sluice-dev/sluice/governor"
)

// Limits reads "rpm=30,tpm=8000,tpd=200000" as governor.Limits'
// UnmarshalText does; the empty string is no limits.
func Limits(s string) (governor.Limits, error) {
	var ls governor.Limits
	err := ls.UnmarshalText([]byte(s))
	return ls, err
}

// Limit reads a limit's name, such as "tpm" (any case).
func Limit(s string) (governor.Limit, error) {
	var l governor.Limit
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// Window reads "rolling" or "fixed" and says whether the windows are fixed
// (governor.Config.FixedWindows).
func Window(s string) (fixed bool, err error) { return either(s, "rolling", "fixed") }

// WindowWord names how a provider counts a period: "fixed" or "rolling".
func WindowWord(fixed bool) string { return word(fixed, "rolling", "fixed") }

// Accounting reads "reserve" or "settle" and says whether a call's real
// output is settled (governor.Config.SettleOutput).
func Accounting(s string) (settle bool, err error) { return either(s, "reserve", "settle") }

// AccountingWord names what a provider keeps of a charge: "settle" or "reserve".
func AccountingWord(settle bool) string { return word(settle, "reserve", "settle") }

// either reads s as no or yes.
func either(s, no, yes string) (bool, error) {
	switch s {
	case no:
		return false, nil
	case yes:
		return true, nil
	}
	return false, fmt.Errorf("%q is not %s or %s", s, no, yes)
}

func word(b bool, no, yes string) string {
	if b {
		return yes
	}
	return no
}
