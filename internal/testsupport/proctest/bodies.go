package proctest

import (
	"bufio"
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// HugeBody is the size of the bodies RequireBodiesBounded sends: far over
// any bound a route has, and over net/http's 32 MiB in-memory share of a
// multipart form, so that a route that parsed it would spool it to a file.
const HugeBody = 50 << 20

// MaxBodyGrowth is how much RequireBodiesBounded lets the process's peak
// resident memory grow while it answers the huge bodies: well under one of
// them, so a route that held one would fail it.
const MaxBodyGrowth = 64 << 20

// RequireBodiesBounded posts a HugeBody-byte multipart form (one file part of
// zeros, with a CSRF cookie and field, as a browser or curl -F sends it) and a
// HugeBody-byte urlencoded form to url, a running process p's, and requires
// that each is answered with a 4xx (the multipart one with want), that no
// file appears in tmpDir (the TMPDIR p was started with) and that p's peak
// resident memory (VmHWM) grew by less than MaxBodyGrowth.
func RequireBodiesBounded(t testing.TB, p *Process, url, tmpDir string, want int) {
	t.Helper()
	before := PeakRSS(t, p.Pid())
	client := &http.Client{Timeout: time.Minute}

	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if err := mw.WriteField("csrf", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := mw.CreateFormFile("f", "big.bin"); err != nil {
		t.Fatal(err)
	}
	tail := "\r\n--" + mw.Boundary() + "--\r\n"
	multi := io.MultiReader(bytes.NewReader(head.Bytes()), io.LimitReader(zeros{}, HugeBody), strings.NewReader(tail))
	status := post(t, client, url, mw.FormDataContentType(), multi, int64(head.Len())+HugeBody+int64(len(tail)))
	requireNoFiles(t, tmpDir)
	if status != want {
		t.Fatalf("proctest: a %d-byte multipart POST to %s: got %d, want %d", HugeBody, url, status, want)
	}

	form := io.MultiReader(strings.NewReader("csrf=x&token="), io.LimitReader(letters{}, HugeBody))
	status = post(t, client, url, "application/x-www-form-urlencoded", form, int64(len("csrf=x&token="))+HugeBody)
	if status < 400 || status >= 500 {
		t.Fatalf("proctest: a %d-byte form POST to %s: got %d, want a 4xx", HugeBody, url, status)
	}
	requireNoFiles(t, tmpDir)

	after := PeakRSS(t, p.Pid())
	t.Logf("proctest: %s: peak RSS %d MiB before the huge bodies, %d MiB after", url, before>>20, after>>20)
	if grew := after - before; grew >= MaxBodyGrowth {
		t.Fatalf("proctest: peak RSS of pid %d grew by %d MiB answering the huge bodies (at most %d MiB)", p.Pid(), grew>>20, MaxBodyGrowth>>20)
	}
}

// post sends body with its length and the console's CSRF cookie, and returns
// the status. The server may answer before it has read the body and close
// the connection; net/http's client still returns that answer.
func post(t testing.TB, client *http.Client, url, contentType string, body io.Reader, length int64) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", contentType)
	req.AddCookie(&http.Cookie{Name: "console_csrf", Value: "x"})
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("proctest: POST %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func requireNoFiles(t testing.TB, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Fatalf("proctest: the process wrote %v to its TMPDIR %s", names, dir)
	}
}

// PeakRSS is the peak resident memory of process pid so far, in bytes: VmHWM
// of /proc/PID/status (Linux).
func PeakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("proctest: peak RSS of pid %d: %v", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("proctest: VmHWM of pid %d: %q", pid, v)
			}
			return kb << 10
		}
	}
	t.Fatalf("proctest: no VmHWM in /proc/%d/status", pid)
	return 0
}

// zeros reads as endless zero bytes; letters as endless 'a's.
type (
	zeros   struct{}
	letters struct{}
)

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (letters) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
