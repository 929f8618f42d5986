package bench

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// machineCPU is the CPU time the whole machine has spent busy since it booted, from
// the first line of /proc/stat (user, nice, system, irq and softirq; not idle, I/O
// wait or steal). ok is false where there is no /proc/stat. A benchmark whose client
// and server share the machine reports the difference per operation: unlike
// throughput, it barely moves with how the scheduler interleaves them.
func machineCPU() (busy time.Duration, ok bool) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 8 || string(fields[0]) != "cpu" {
		return 0, false
	}
	// /proc/stat counts in USER_HZ, 100 per second on every Linux architecture Go
	// supports.
	const tick = 10 * time.Millisecond
	for _, col := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		n, err := strconv.ParseInt(string(fields[col]), 10, 64)
		if err != nil {
			return 0, false
		}
		busy += time.Duration(n) * tick
	}
	return busy, true
}
