package govtext

import (
	"testing"

	"github.com/sluice-dev/sluice/governor"
)

// TestWords: each setting reads back from the word it is written as, and a
// word in another case, or none of them, is refused with an error naming
// the words it may be.
func TestWords(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		if got, err := Window(WindowWord(fixed)); err != nil || got != fixed {
			t.Errorf("Window(%q) = %v, %v; want %v", WindowWord(fixed), got, err, fixed)
		}
	}
	for _, settle := range []bool{false, true} {
		if got, err := Accounting(AccountingWord(settle)); err != nil || got != settle {
			t.Errorf("Accounting(%q) = %v, %v; want %v", AccountingWord(settle), got, err, settle)
		}
	}
	if _, err := Window("Rolling"); err == nil || err.Error() != `"Rolling" is not rolling or fixed` {
		t.Errorf("Window(Rolling) = %v", err)
	}
	if _, err := Accounting("later"); err == nil || err.Error() != `"later" is not reserve or settle` {
		t.Errorf("Accounting(later) = %v", err)
	}
}

// TestLimits: limits read back from their String and text form; names in
// any case are read; an unknown name, a repeated one and a value that is
// not a positive whole number are refused, naming it.
func TestLimits(t *testing.T) {
	want := governor.Limits{governor.RPM: 30, governor.TPD: 200_000, governor.OTPM: 1000}
	got, err := Limits(want.String())
	if err != nil || got != want {
		t.Fatalf("Limits(%q) = %v, %v", want.String(), got, err)
	}
	if b, err := want.MarshalText(); err != nil || string(b) != "rpm=30,tpd=200000,otpm=1000" {
		t.Errorf("MarshalText = %q, %v", b, err)
	}
	if got, err := Limits("RPM=30, tpd=200_000,otpm=1000"); err != nil || got != want {
		t.Errorf("Limits in other case and with spaces = %v, %v", got, err)
	}
	if got, err := Limits(" "); err != nil || got != (governor.Limits{}) {
		t.Errorf("Limits(blank) = %v, %v; want none", got, err)
	}
	for in, msg := range map[string]string{
		"rph=3":         `unknown limit "rph" (want one of rpm, rpd, tpm, tpd, itpm, otpm)`,
		"tpm=1,tpm=2":   "limit tpm given twice",
		"tpm=0":         `limit tpm: value "0" is not a positive whole number`,
		"tpm":           `limit "tpm": want name=value, e.g. tpm=8000`,
		"otpm=1e3":      `limit otpm: value "1e3" is not a positive whole number`,
		"rpm=-1,tpm=10": `limit rpm: value "-1" is not a positive whole number`,
	} {
		if _, err := Limits(in); err == nil || err.Error() != msg {
			t.Errorf("Limits(%q) = %v, want %q", in, err, msg)
		}
	}
	for l := range governor.NumLimits {
		if got, err := Limit(l.String()); err != nil || got != l {
			t.Errorf("Limit(%q) = %v, %v", l, got, err)
		}
		if b, err := l.MarshalText(); err != nil || string(b) != l.String() {
			t.Errorf("%v.MarshalText = %q, %v", l, b, err)
		}
	}
	if _, err := governor.NumLimits.MarshalText(); err == nil {
		t.Error("MarshalText of a limit that is none wrote it")
	}
}
