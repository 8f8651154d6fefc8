//go:build !unix

package convbench

import "time"

// cpuTime is 0 where the process's CPU time is not read: the benchmarks
// that need it skip.
func cpuTime() time.Duration { return 0 }
