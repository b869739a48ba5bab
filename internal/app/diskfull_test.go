package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/audit"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// mountChildEnv marks the child process of a test that runs in user and
// mount namespaces of its own.
const mountChildEnv = "CROSSCHECK_TEST_MOUNT_CHILD"

// inOwnMounts runs the calling test again in a child process of its own
// user and mount namespaces, where it may mount a small file system, and
// reports whether this is that child. In the parent it returns false once
// the child has passed (its output logged), fails the test when the child
// failed, and skips it when the kernel refuses unprivileged namespaces.
func inOwnMounts(t *testing.T) bool {
	t.Helper()
	if os.Getenv(mountChildEnv) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), mountChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err != nil && !errors.As(err, &exit):
		t.Skipf("no user and mount namespaces for a small file system: %v", err)
	case strings.Contains(out.String(), "--- SKIP"):
		t.Skipf("the child skipped:\n%s", out.String())
	case err != nil:
		t.Fatalf("the child failed: %v\n%s", err, out.String())
	}
	t.Logf("child:\n%s", out.String())
	return false
}

// smallDisk mounts a tmpfs of size bytes (in the child of inOwnMounts) and
// returns its path; the test is skipped where the mount is refused.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// freeOf returns the bytes free on dir's file system.
func freeOf(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill writes the file path until dir's file system has at most leave
// bytes free (0: until it is full).
func fill(t *testing.T, path string, leave int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for freeOf(t, filepath.Dir(path))-int64(chunk) >= leave {
			if _, err := f.Write(buf); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				t.Fatal(err)
			}
		}
	}
}

// onDisk is the harness option that puts the data dir on dir.
func onDisk(dir string) option {
	return func(h *harness) { h.cfg.DataDir, h.dir = dir, dir }
}

// Below the free-space floor, submissions and uploads are refused with a
// message that says the store is low on space, before the disk is full;
// reads go on, and admissions come back when space does.
func TestStoreFloorRefusesAdmissions(t *testing.T) {
	if !inOwnMounts(t) {
		return
	}
	disk := smallDisk(t, 64<<20)
	data := filepath.Join(disk, "data")
	h := newHarness(t, onDisk(data), withConfig(func(c *config.Config) { c.StoreMinFreeMB = 16 }))
	key := h.newKey()
	id := h.submitOK(key, "before the disk fills")
	h.wait(key, id, 30*time.Second)

	ballast := filepath.Join(disk, "ballast")
	fill(t, ballast, 8<<20)
	var refused response
	eventually(t, 10*time.Second, "a submission refused below the floor", func() bool {
		refused = h.submit(key, map[string]any{"mode": "unify", "prompt": "below the floor"})
		return refused.status == 503
	})
	msg, _ := jsonPath(refused.json(t), "error", "message").(string)
	must(t, refused.errCode(t) == "service_restarting" && strings.Contains(msg, "disk space"), "below the floor: %s", refused.body)
	up := h.upload(key, "notes.txt", []byte("some text"))
	must(t, up.status == 503 && up.errCode(t) == "service_restarting", "an upload below the floor: %d %s", up.status, up.body)
	must(t, h.api("GET", "/v1/queries/"+id, key, nil).status == 200, "a poll below the floor fails")
	s := h.scrape(h.m.AdminURL())
	must(t, s.sum("crosscheck_store_disk_free_bytes") > 0 && s.sum("crosscheck_store_disk_free_bytes") < 16<<20, "crosscheck_store_disk_free_bytes = %v", s.sum("crosscheck_store_disk_free_bytes"))
	must(t, s.sum("crosscheck_store_disk_floor_bytes") == 16<<20, "crosscheck_store_disk_floor_bytes = %v", s.sum("crosscheck_store_disk_floor_bytes"))

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	var again string
	eventually(t, 10*time.Second, "a submission admitted once space is back", func() bool {
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": "space is back"})
		if r.status == 202 {
			again, _ = r.json(t)["request_id"].(string)
		}
		return r.status == 202
	})
	h.wait(key, again, 30*time.Second)
}

// A disk that fills makes JetStream fail its writes for good (the server
// keeps a stream's write error until it restarts). The server's own reason
// reaches the log, /readyz fails while it lasts, and once the disk has room
// again the service takes submissions again by itself: no query accepted
// before is lost, and the audit passes.
func TestFullDiskRecovers(t *testing.T) {
	if !inOwnMounts(t) {
		return
	}
	disk := smallDisk(t, 64<<20)
	data := filepath.Join(disk, "data")
	h := newHarness(t, onDisk(data), withConfig(func(c *config.Config) { c.StoreMinFreeMB = 0 }))
	key := h.newKey()
	before := h.submitOK(key, "before the disk fills")
	h.wait(key, before, 30*time.Second)

	ballast := filepath.Join(disk, "ballast")
	fill(t, ballast, 0)
	// The store's files may still have room in their last pages: the
	// submissions fail once those are used up.
	var accepted []string
	var refused map[string]any // the body refused, retried below as a client does
	for i := 0; refused == nil; i++ {
		body := map[string]any{"mode": "unify", "prompt": fmt.Sprintf("on a full disk %d", i)}
		r := h.submit(key, body, map[string]string{"Idempotency-Key": fmt.Sprintf("full-%d", i)})
		switch {
		case r.status == 202:
			accepted = append(accepted, r.json(t)["request_id"].(string))
			must(t, i < 500, "500 submissions accepted on a full disk")
		case r.status == 503 && r.errCode(t) == "service_restarting":
			refused, body["key"] = body, fmt.Sprintf("full-%d", i)
		default:
			t.Fatalf("a submission on a full disk: %d %s", r.status, r.body)
		}
	}
	t.Logf("%d submissions accepted on the full disk before the first refusal", len(accepted))
	var ready response
	eventually(t, 30*time.Second, "/readyz to fail while the store cannot write", func() bool {
		ready = h.call(h.m.URL(), "GET", "/readyz", "", nil, nil)
		return ready.status == 503
	})
	t.Logf("/readyz on a full disk: %s", ready.body)
	must(t, strings.Contains(h.logs.String(), "no space left on device"), "the server's reason is not in the log:\n%s", h.logs.String())

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	pollUntil(t, 60*time.Second, 10*time.Millisecond, "/readyz to pass once the disk has room", func() bool {
		return h.call(h.m.URL(), "GET", "/readyz", "", nil, nil).status == 200
	})
	readyAfter := time.Since(freed)
	// The client retries the refused submission with its Idempotency-Key.
	idem := refused["key"].(string)
	delete(refused, "key")
	var after string
	pollUntil(t, 60*time.Second, 10*time.Millisecond, "the refused submission admitted once the disk has room", func() bool {
		r := h.submit(key, refused, map[string]string{"Idempotency-Key": idem})
		if r.status == 202 {
			after, _ = r.json(t)["request_id"].(string)
		}
		return r.status == 202
	})
	admittedAfter := time.Since(freed)
	h.wait(key, after, 30*time.Second)
	completedAfter := time.Since(freed)
	t.Logf("recovery after the disk was freed: ready in %v, first submission admitted in %v, completed in %v", readyAfter, admittedAfter, completedAfter)
	must(t, h.wait(key, before, 5*time.Second)["status"] == "completed", "the query accepted before the disk filled is gone")
	for _, id := range accepted {
		h.wait(key, id, 30*time.Second)
	}

	// The other way back: a process that exits and is started again on the
	// same data, from its start to its first admitted submission.
	h.m.Close()
	start := time.Now()
	h.start()
	pollUntil(t, 60*time.Second, 10*time.Millisecond, "a submission admitted after a restart", func() bool {
		return h.submit(key, map[string]any{"mode": "unify", "prompt": "after a restart"}).status == 202
	})
	t.Logf("a new process on the same data: first submission admitted %v after its start", time.Since(start))
	h.m.Close()
	h.offline(func(store *eventstore.Store) {
		rep, err := audit.Run(context.Background(), store)
		if err != nil {
			t.Fatal(err)
		}
		must(t, rep.OK(), "audit: %v", rep.Problems)
	})
	h.start() // the harness's clean-up closes it
}
