package extract

import (
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// MemoryPlan shares a process's memory between the process and its
// extraction children, which the kernel counts in the same cgroup.
type MemoryPlan struct {
	// Process is the memory of the whole process, its children included:
	// the lower of its cgroup's memory limit and GOMEMLIMIT, or, with
	// neither set, the machine's memory (0 when unknown).
	Process int64
	// Source is where Process comes from: "cgroup", "GOMEMLIMIT",
	// "machine" or "" (unknown).
	Source string
	// Children is the memory the children may take together.
	Children int64
	// GoLimit is the Go memory limit of the process that leaves the
	// children their share of a limit: Process less Children (but at
	// least a quarter of Process), or GOMEMLIMIT if lower; GOMEMLIMIT as
	// it is when no limit is set (Source "machine" or "").
	GoLimit int64
}

// DefaultBudget is the children's memory when the process's is unknown.
const DefaultBudget = DefaultParallel * DefaultMemory

// PlanMemory returns the plan of this process: children bytes for the
// children when above zero, else a quarter of the process's memory.
func PlanMemory(children int64) MemoryPlan {
	root := os.DirFS("/")
	return planMemory(children, cgroupMemory(root), debug.SetMemoryLimit(-1), machineMemory(root))
}

// planMemory is PlanMemory of a cgroup limit (0: none), a Go memory limit
// (math.MaxInt64: none) and a machine's memory (0: unknown).
func planMemory(children, cgroup, goLimit, machine int64) MemoryPlan {
	p := MemoryPlan{GoLimit: goLimit}
	switch {
	case cgroup > 0 && cgroup <= goLimit:
		p.Process, p.Source = cgroup, "cgroup"
	case goLimit < math.MaxInt64:
		p.Process, p.Source = goLimit, "GOMEMLIMIT"
	case machine > 0:
		p.Process, p.Source = machine, "machine"
	}
	p.Children = children
	if p.Children <= 0 {
		p.Children = p.Process / 4
		if p.Process == 0 {
			p.Children = DefaultBudget
		}
	}
	if p.Source == "cgroup" || p.Source == "GOMEMLIMIT" {
		p.GoLimit = min(goLimit, max(p.Process-p.Children, p.Process/4))
	}
	return p
}

// cgroupMemory returns the lowest memory limit of the process's cgroup and
// its ancestors, in bytes, read from fsys (the root of the file system):
// cgroup v2's memory.max, or v1's memory.limit_in_bytes; 0 when none is
// set or found. A cgroup path that is not under the mount (a container
// without its own cgroup namespace sees the host's path) falls back to
// the mount's root, which is then the container's cgroup.
func cgroupMemory(fsys fs.FS) int64 {
	b, _ := fs.ReadFile(fsys, "proc/self/cgroup")
	var limit int64
	lower := func(file string) bool {
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			return false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && n > 0 && n < 1<<60 && (limit == 0 || n < limit) {
			limit = n
		}
		return true
	}
	for line := range strings.Lines(string(b)) {
		// hierarchy-ID:controllers:path; v2's is 0::path.
		fields := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(fields) != 3 {
			continue
		}
		mount, file := "sys/fs/cgroup", "memory.max"
		switch {
		case fields[0] == "0" && fields[1] == "":
		case slices.Contains(strings.Split(fields[1], ","), "memory"):
			mount, file = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		dir := strings.Trim(fields[2], "/")
		found := false
		for dir != "" && dir != "." {
			found = lower(path.Join(mount, dir, file)) || found
			dir = path.Dir(dir)
		}
		if !found || fields[2] == "/" {
			lower(path.Join(mount, file))
		}
	}
	return limit
}

// machineMemory returns MemTotal of /proc/meminfo in fsys, in bytes; 0
// when unknown.
func machineMemory(fsys fs.FS) int64 {
	b, _ := fs.ReadFile(fsys, "proc/meminfo")
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
