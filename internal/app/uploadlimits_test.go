package app

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"mime/multipart"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// stalledUpload sends, as key, an upload's headers and the start of its
// body, then nothing more, and returns the connection.
func stalledUpload(t *testing.T, h *harness, key string) net.Conn {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "a.png")
	fw.Write(drawn(t, png.Encode))
	c := rawConn(t, h.m.URL())
	fmt.Fprintf(c, "POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: 10000000\r\n\r\n", key, mw.FormDataContentType())
	c.Write(body.Bytes())
	c.Write(make([]byte, 8192))
	return c
}

// TestStalledUploadsHoldNoOneElsesUploads: one key holds at most its share
// of the uploads in progress (the next is 429 rate_limited), another
// account uploads while they stall, and an upload that stops sending ends
// after the read timeout instead of holding its slot for minutes.
func TestStalledUploadsHoldNoOneElsesUploads(t *testing.T) {
	// The stalled uploads hold their slots for the read timeout: long enough
	// for the checks below on a slow machine, far below the upload's minutes.
	h := newHarness(t, withConfig(func(c *config.Config) { c.HTTP.ReadTimeout = 20 * time.Second }))
	stalling, other := h.newKey(), h.newKey()
	var stalled []net.Conn
	for range 2 {
		stalled = append(stalled, stalledUpload(t, h, stalling))
	}
	eventually(t, 15*time.Second, "a third upload of the stalling key refused", func() bool {
		r := h.upload(stalling, "third.py", []byte("x = 1\n"))
		return r.status == 429 && r.errCode(t) == "rate_limited"
	})
	r := h.upload(other, "notes.py", []byte("x = 1\n"))
	must(t, r.status == 201, "another account's upload while one key stalls: %d %s", r.status, r.body)
	for i, c := range stalled {
		// An answer, or the connection closed: either ends it well before
		// the upload's overall deadline of minutes.
		resp, _, err := readAnswer(c, 30*time.Second)
		if err == nil {
			must(t, resp.StatusCode >= 400, "stalled upload %d answered %d", i, resp.StatusCode)
		} else {
			must(t, !strings.Contains(err.Error(), "timeout"), "stalled upload %d still held after 30 s: %v", i, err)
		}
	}
	eventually(t, 30*time.Second, "the stalling key's slots back", func() bool {
		return h.upload(stalling, "again.py", []byte("x = 2\n")).status == 201
	})
}

// TestUploadPartHeadersAreBounded: a part header of a megabyte is refused
// (Go's multipart reader would buffer up to 10 MB of it per connection).
func TestUploadPartHeadersAreBounded(t *testing.T) {
	h := newHarness(t)
	key := h.newKey()
	const boundary = "b0undary"
	body := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.py\"\r\nX-Junk: " +
		strings.Repeat("j", 1<<20) + "\r\n\r\nx = 1\r\n--" + boundary + "--\r\n"
	r := h.api("POST", "/v1/files", key, []byte(body), map[string]string{"Content-Type": "multipart/form-data; boundary=" + boundary})
	must(t, r.status == 400 && r.errCode(t) == "invalid_request", "a 1 MB part header: %d %s", r.status, r.body)
}

// TestIdempotentRetryAfterTheFileIsGone: a client that resubmits with the
// same Idempotency-Key (its first answer lost) gets the same query back even
// when a file it attached has been deleted since; a new key is refused.
func TestIdempotentRetryAfterTheFileIsGone(t *testing.T) {
	h := newHarness(t)
	key := h.newKey()
	up := h.upload(key, "notes.py", []byte("KELVIN = 7431\n"))
	must(t, up.status == 201, "upload: %d %s", up.status, up.body)
	fileID := up.json(t)["file_id"].(string)
	body := map[string]any{"mode": "unify", "prompt": "What does the file set?", "files": []string{fileID}}
	first := h.submit(key, body, map[string]string{"Idempotency-Key": "ik-file-gone"})
	must(t, first.status == 202, "first: %d %s", first.status, first.body)
	must(t, h.api("DELETE", "/v1/files/"+fileID, key, nil).status == 200, "delete the file")

	again := h.submit(key, body, map[string]string{"Idempotency-Key": "ik-file-gone"})
	must(t, again.status == 202 && again.json(t)["request_id"] == first.json(t)["request_id"] && again.json(t)["idempotent_replayed"] == true,
		"the retry after the file was deleted: %d %s", again.status, again.body)
	fresh := h.submit(key, body, map[string]string{"Idempotency-Key": "ik-file-gone-2"})
	must(t, fresh.status == 400 && fresh.errCode(t) == "file_not_found", "a new key with the deleted file: %d %s", fresh.status, fresh.body)
}

// TestRefusedRequestClosesItsConnection: a request refused before its body
// is read (here without a key) is answered at once and its connection is
// closed, not held until the read timeout while the server drains a body
// that never comes.
func TestRefusedRequestClosesItsConnection(t *testing.T) {
	h := newHarness(t)
	for _, path := range []string{"/v1/files", "/v1/queries"} {
		c := rawConn(t, h.m.URL())
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"mode\":", path)
		resp, _, err := readAnswer(c, 10*time.Second)
		must(t, err == nil && resp.StatusCode == 401, "%s without a key: %v %v", path, resp, err)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 1))
		must(t, n == 0 && err != nil && !strings.Contains(err.Error(), "timeout"), "%s: the connection is still open 5 s after the refusal (%v)", path, err)
	}
}

// TestTricklingUploadsAreEnded: an upload must send at least
// handlers.MinUploadBytes in each read timeout, or it ends; two keys each
// trickling a byte now and then (or 64 KiB now and then, at a first
// minimum of 64 KiB) into their two uploads held all of the process's
// upload slots for the upload's 10 minutes, and another tenant's upload got
// no answer.
func TestTricklingUploadsAreEnded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.HTTP.ReadTimeout = 3 * time.Second }))
	done := make(chan struct{})
	defer close(done)
	var trickling []net.Conn
	for range 2 {
		key := h.newKey()
		for range 2 {
			c := stalledUpload(t, h, key)
			trickling = append(trickling, c)
			// A byte every half second, or 64 KiB every two seconds: both
			// send less than MinUploadBytes in the read timeout.
			every, chunk := 500*time.Millisecond, 1
			if len(trickling)%2 == 0 {
				every, chunk = 2*time.Second, 64<<10
			}
			go func() {
				for {
					select {
					case <-done:
						return
					case <-time.After(every):
					}
					if _, err := c.Write(make([]byte, chunk)); err != nil {
						return
					}
				}
			}()
		}
	}
	time.Sleep(time.Second) // the trickles take the slots
	r := h.upload(h.newKey(), "notes.py", []byte("x = 1\n"))
	must(t, r.status == 201, "another tenant's upload while four trickle: %d %s", r.status, r.body)
	for i, c := range trickling {
		resp, body, err := readAnswer(c, 20*time.Second)
		if err == nil {
			must(t, resp.StatusCode == 400 && strings.Contains(string(body), "too slowly"), "trickling upload %d answered %d %s", i, resp.StatusCode, body)
		} else {
			must(t, !strings.Contains(err.Error(), "timeout"), "trickling upload %d still held after 20 s: %v", i, err)
		}
	}
}

// TestAccountFilesAreBounded: an account's live files hold at most
// CROSSCHECK_FILES_MAX_ACCOUNT_MB; an upload past it is refused and stores
// nothing, and deleting a file makes room. One free key filled the disk at
// 125 MB/s before.
func TestAccountFilesAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.FilesMaxAccountMB = 1 }))
	key := h.newKey()
	content := []byte("# " + strings.Repeat("x", 600<<10) + "\n")
	first := h.upload(key, "one.py", content)
	must(t, first.status == 201, "first upload: %d %s", first.status, first.body)
	r := h.upload(key, "two.py", content)
	must(t, r.status == 413 && r.errCode(t) == "file_too_large" && strings.Contains(string(r.body), "DELETE /v1/files"), "an upload past the account's bound: %d %s", r.status, r.body)
	list := h.api("GET", "/v1/files", key, "")
	data, _ := list.json(t)["data"].([]any)
	must(t, len(data) == 1, "files after the refusal: %s", list.body)
	must(t, h.upload(h.newKey(), "other.py", content).status == 201, "another account's upload")
	// An upload that cannot fit is refused once it passes what is left,
	// not read and stored whole first: this one stalls after 1 MB.
	c := rawConn(t, h.m.URL())
	var part bytes.Buffer
	mw := multipart.NewWriter(&part)
	fw, _ := mw.CreateFormFile("file", "big.py")
	fw.Write([]byte("# " + strings.Repeat("x", 1<<20)))
	fmt.Fprintf(c, "POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: 10000000\r\n\r\n", key, mw.FormDataContentType())
	c.Write(part.Bytes())
	resp, body, err := readAnswer(c, 10*time.Second)
	must(t, err == nil && resp.StatusCode == 413 && strings.Contains(string(body), "live files"), "a stalled upload past the account's bound: %v %v %s", resp, err, body)
	del := h.api("DELETE", "/v1/files/"+first.json(t)["file_id"].(string), key, "")
	must(t, del.status < 300, "delete: %d %s", del.status, del.body)
	r = h.upload(key, "two.py", content)
	must(t, r.status == 201, "an upload after a delete made room: %d %s", r.status, r.body)
}

// TestFileEventsAreBounded: the FILES stream keeps a file's events for a
// bounded time after the file's own 48 h: an upload-then-delete cycle kept
// 1.5 KB there forever.
func TestFileEventsAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	st, err := storetest.JetStream(t, h.m.Store).Stream(context.Background(), "FILES")
	must(t, err == nil, "stream: %v", err)
	cfg := st.CachedInfo().Config
	must(t, cfg.MaxAge >= 49*time.Hour && cfg.MaxAge <= 7*24*time.Hour, "FILES keeps its events for %s; want a bound past the files' 48 h", cfg.MaxAge)
}

// TestAccountUploadsPerDayAreBounded: an account uploads at most
// CROSSCHECK_FILES_MAX_UPLOADS_PER_DAY files in any 24 hours, deleted ones
// counted: past it, 429 rate_limited with the wait until the oldest of them
// is a day old. Another account is not affected; a day later the account
// uploads again.
func TestAccountUploadsPerDayAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.FilesMaxUploadsPerDay = 3 }))
	key := h.newKey()
	for i := range 3 {
		r := h.upload(key, fmt.Sprintf("churn%d.py", i), []byte("print(1)\n"))
		must(t, r.status == 201, "upload %d: %d %s", i, r.status, r.body)
		del := h.api("DELETE", "/v1/files/"+r.json(t)["file_id"].(string), key, "")
		must(t, del.status < 300, "delete %d: %d %s", i, del.status, del.body)
	}
	r := h.upload(key, "fourth.py", []byte("print(1)\n"))
	must(t, r.status == 429 && r.errCode(t) == "rate_limited" && strings.Contains(string(r.body), "3 files in the last 24 hours"), "a fourth upload in a day: %d %s", r.status, r.body)
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	must(t, err == nil && ra > 23*3600 && ra <= 24*3600, "Retry-After %q, want the wait until the first upload is a day old", r.header.Get("Retry-After"))
	must(t, h.upload(h.newKey(), "other.py", []byte("print(1)\n")).status == 201, "another account's upload")
	h.clock.Advance(24*time.Hour + time.Minute)
	must(t, h.upload(key, "next-day.py", []byte("print(1)\n")).status == 201, "an upload a day later")
}
