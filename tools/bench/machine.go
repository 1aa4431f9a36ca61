package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// facts describe the machine and software a report was measured on.
type facts struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	MemoryGiB  string `json:"memory_gib"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	GRPC       string `json:"grpc_go"`
	NATSServer string `json:"nats_server"`
	NATSClient string `json:"nats_go"`
	Disk       string `json:"disk"`
	Commit     string `json:"commit"`
}

func machineFacts(c config, dir string) facts {
	f := facts{Cores: runtime.NumCPU(), Go: runtime.Version(), Disk: diskFacts(dir)}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				f.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			f.MemoryGiB = fmt.Sprintf("%.1f", float64(kb)/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		f.Kernel = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "google.golang.org/grpc":
				f.GRPC = d.Version
			case "github.com/nats-io/nats.go":
				f.NATSClient = d.Version
			}
		}
	}
	if out, err := exec.Command(filepath.Join(c.binDir, "nats-server"), "--version").Output(); err == nil {
		f.NATSServer = strings.TrimSpace(strings.TrimPrefix(string(out), "nats-server: "))
	}
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		f.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			f.Commit += " (with uncommitted changes)"
		}
	}
	return f
}

// diskFacts names the device and file system that hold dir.
func diskFacts(dir string) string {
	mf, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer mf.Close()
	best, fsType, source := "", "", ""
	sc := bufio.NewScanner(mf)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 2 {
			continue
		}
		mp := pf[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, fsType, source = mp, qf[0], qf[1]
		}
	}
	desc := fmt.Sprintf("%s (%s on %s)", source, fsType, best)
	dev := strings.TrimPrefix(source, "/dev/")
	if rot, err := os.ReadFile("/sys/block/" + dev + "/queue/rotational"); err == nil {
		kind := "non-rotational"
		if strings.TrimSpace(string(rot)) == "1" {
			kind = "reported rotational (virtual disks often report 1)"
		}
		desc += ", " + kind
	}
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) == nil {
		desc += fmt.Sprintf(", %.0f GiB free", float64(st.Bavail)*float64(st.Bsize)/(1<<30))
	}
	return desc
}
