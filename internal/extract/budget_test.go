package extract

import (
	"math"
	"testing"
	"testing/fstest"
)

func TestPlanMemory(t *testing.T) {
	const gib = 1 << 30
	none := int64(math.MaxInt64)
	tests := []struct {
		name                               string
		children, cgroup, goLimit, machine int64
		want                               MemoryPlan
	}{
		{"a 1 GiB container with GOMEMLIMIT at its limit", 0, gib, gib, 16 * gib,
			MemoryPlan{Process: gib, Source: "cgroup", Children: gib / 4, GoLimit: gib * 3 / 4}},
		{"a 1 GiB container without GOMEMLIMIT", 0, gib, none, 16 * gib,
			MemoryPlan{Process: gib, Source: "cgroup", Children: gib / 4, GoLimit: gib * 3 / 4}},
		{"GOMEMLIMIT below the container's limit, lower than its share", 0, 2 * gib, gib, 0,
			MemoryPlan{Process: gib, Source: "GOMEMLIMIT", Children: gib / 4, GoLimit: gib * 3 / 4}},
		{"GOMEMLIMIT well below the room the children leave", 0, 4 * gib, gib / 2, 0,
			MemoryPlan{Process: gib / 2, Source: "GOMEMLIMIT", Children: gib / 8, GoLimit: gib * 3 / 8}},
		{"no limit: a share of the machine, the Go limit untouched", 0, 0, none, 8 * gib,
			MemoryPlan{Process: 8 * gib, Source: "machine", Children: 2 * gib, GoLimit: none}},
		{"nothing known", 0, 0, none, 0,
			MemoryPlan{Children: DefaultBudget, GoLimit: none}},
		{"an operator's budget", 512 << 20, gib, gib, 0,
			MemoryPlan{Process: gib, Source: "cgroup", Children: 512 << 20, GoLimit: 512 << 20}},
		{"an operator's budget over the process: the process keeps a quarter", 2 * gib, gib, none, 0,
			MemoryPlan{Process: gib, Source: "cgroup", Children: 2 * gib, GoLimit: gib / 4}},
	}
	for _, tt := range tests {
		if got := planMemory(tt.children, tt.cgroup, tt.goLimit, tt.machine); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestCgroupMemory(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name string
		fsys fstest.MapFS
		want int64
	}{
		{"v2 in a cgroup namespace", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("1073741824\n"),
			"proc/meminfo":             file("MemTotal: 1000 kB\n"),
		}, 1 << 30},
		{"v2 unlimited", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}, 0},
		{"v2 on a host: the lowest of the cgroup and its ancestors", fstest.MapFS{
			"proc/self/cgroup": file("0::/system.slice/crosscheck.service\n"),
			"sys/fs/cgroup/system.slice/crosscheck.service/memory.max": file("max\n"),
			"sys/fs/cgroup/system.slice/memory.max":                    file("2147483648\n"),
		}, 2 << 30},
		{"v1 without a cgroup namespace: the mount's root", fstest.MapFS{
			"proc/self/cgroup":                           file("12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("536870912\n"),
		}, 512 << 20},
		{"v1 unlimited", fstest.MapFS{
			"proc/self/cgroup":                           file("4:cpu,memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0},
		{"no cgroup", fstest.MapFS{}, 0},
	}
	for _, tt := range tests {
		if got := cgroupMemory(tt.fsys); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
	if got := machineMemory(fstest.MapFS{"proc/meminfo": file("MemTotal:       24681448 kB\nMemFree: 1 kB\n")}); got != 24681448<<10 {
		t.Errorf("machineMemory = %d", got)
	}
}

// TestRunnerShareOfTheBudget: the children's memory limits add up to at
// most the budget, with at least one child.
func TestRunnerShareOfTheBudget(t *testing.T) {
	for _, tt := range []struct {
		budget, memory int64
		n              int
		each           int64
	}{
		{1 << 30, DefaultMemory, 4, DefaultMemory},
		{600 << 20, DefaultMemory, 2, DefaultMemory},
		{256 << 20, DefaultMemory, 1, DefaultMemory},
		{200 << 20, DefaultMemory, 1, 200 << 20},
		{10 << 20, DefaultMemory, 1, MinMemory},
		{8 << 30, DefaultMemory, DefaultParallel, DefaultMemory},
	} {
		r := &Runner{Budget: tt.budget, Memory: tt.memory}
		if n, each := r.Children(); n != tt.n || each != tt.each {
			t.Errorf("budget %d MiB: %d children of %d MiB, want %d of %d MiB", tt.budget>>20, n, each>>20, tt.n, tt.each>>20)
		}
	}
}
