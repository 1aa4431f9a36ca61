package storage

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// virtioBalloon is the virtio device id of a memory balloon, and
// balloonReporting the feature bit of its free page reporting
// (VIRTIO_BALLOON_F_REPORTING).
const (
	virtioBalloon    = "0x0005"
	balloonReporting = 5
)

// AutoPageCacheBudget returns the page-cache budget a node uses when none is
// configured, and why: a quarter of the machine's memory where a virtio
// balloon reports free pages to the host (see PageCache), no budget
// elsewhere.
func AutoPageCacheBudget() (int64, string) {
	return autoPageCacheBudget("/sys/bus/virtio/devices", "/proc/meminfo")
}

func autoPageCacheBudget(devices, meminfo string) (int64, string) {
	if !freePageReporting(devices) {
		return 0, "no virtio balloon reports free pages: the kernel manages the page cache"
	}
	total := memTotal(meminfo)
	if total <= 0 {
		return 0, "a virtio balloon reports free pages, but " + meminfo + " gives no MemTotal"
	}
	return total / 4, "a virtio balloon reports free pages to the host: a quarter of MemTotal"
}

func freePageReporting(devices string) bool {
	dirs, _ := filepath.Glob(filepath.Join(devices, "*")) // a bad pattern is impossible here
	for _, d := range dirs {
		id, err := os.ReadFile(filepath.Join(d, "device"))
		if err != nil || strings.TrimSpace(string(id)) != virtioBalloon {
			continue
		}
		// One character per feature bit, '1' when negotiated.
		f, err := os.ReadFile(filepath.Join(d, "features"))
		if err == nil && len(f) > balloonReporting && f[balloonReporting] == '1' {
			return true
		}
	}
	return false
}

func memTotal(meminfo string) int64 {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return 0
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
