package app

import (
	"runtime/debug"
	"time"

	"github.com/crosscheck/crosscheck/internal/extract"
)

// extractRunner returns the runner of the process's extraction children,
// from the settings, and makes it the one extract.File uses too: one memory
// budget, a share of the process's memory (extract.PlanMemory), bounds all
// of them. A process that serves the API, whose children extract uploads
// at any time, lowers its own Go memory limit (GOMEMLIMIT) to what the
// budget leaves of the process's limit, so that it and its children fit
// together.
func (m *Main) extractRunner() *extract.Runner {
	cfg := m.Config.Extract
	plan := extract.PlanMemory(int64(cfg.MemoryMB) << 20)
	r := &extract.Runner{
		Budget:     plan.Children,
		Memory:     int64(cfg.ChildMemoryMB) << 20,
		CPUSeconds: cfg.CPUSeconds,
		AccountCPU: time.Duration(cfg.AccountCPUSeconds) * time.Second,
	}
	if cfg.AccountCPUSeconds == 0 {
		r.AccountCPU = -1 // no bound
	}
	extract.UseRunner(r)
	n, each := r.Children()
	ev := m.Log.Info().Int("children", n).Int64("child_memory_mb", each>>20).
		Int64("process_memory_mb", plan.Process>>20).Str("process_memory_from", plan.Source)
	if m.runsAPI() && plan.GoLimit < debug.SetMemoryLimit(-1) {
		debug.SetMemoryLimit(plan.GoLimit)
		ev = ev.Int64("go_memory_limit_mb", plan.GoLimit>>20)
	}
	ev.Msg("extraction children")
	return r
}
