// Package tzname tells IANA time zone names from other strings without the
// host's zoneinfo: a scratch or distroless image has no /usr/share/zoneinfo,
// and time.LoadLocation fails there for every name but "UTC". The names
// are those of the tz database the Go toolchain ships (the one time/tzdata
// embeds), generated into names.go; a name the host's zoneinfo knows is
// accepted too, so a zone newer than the list still passes where the host
// has it. The SDK (context.time_zone, spec 7.4, PA-7.4-06) and poppytest
// (CO side of the same check) share it.
package tzname

//go:generate go run ./gen

import (
	"slices"
	"time"
)

// Valid reports whether name is an IANA time zone name, such as
// "America/Los_Angeles" or "UTC". "" and "Local" are not: they name no
// zone of the database.
func Valid(name string) bool {
	if name == "" || name == "Local" || len(name) > 64 {
		return false
	}
	if _, ok := slices.BinarySearch(names[:], name); ok {
		return true
	}
	// A zone newer than the list, on a host whose zoneinfo has it.
	_, err := time.LoadLocation(name)
	return err == nil
}
