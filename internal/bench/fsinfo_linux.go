package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// FSInfo says where a directory's files are stored.
type FSInfo struct {
	Type   string `json:"filesystem"`  // e.g. "ext4", "xfs", "tmpfs"
	Device string `json:"device"`      // e.g. "/dev/nvme0n1p2"; empty if unknown
	Mount  string `json:"mount_point"` // where that file system is mounted
}

func (fi FSInfo) String() string {
	s := fi.Type
	if fi.Device != "" {
		s += " on " + fi.Device
	}
	if fi.Mount != "" {
		s += ", mounted at " + fi.Mount
	}
	return s
}

// fsInfo finds the mount that holds dir in /proc/self/mountinfo, matching
// its device number, and falls back to statfs's file system type.
func fsInfo(dir string) (FSInfo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return FSInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		return FSInfo{}, fmt.Errorf("stat %s: %w", abs, err)
	}
	info := FSInfo{Type: statfsType(abs)}
	devID := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)))
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return info, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) || fields[2] != devID {
			continue
		}
		mount := unescapeMount(fields[4])
		if !within(abs, mount) || len(mount) < len(info.Mount) {
			continue
		}
		info.Mount, info.Type, info.Device = mount, fields[sep+1], fields[sep+2]
	}
	return info, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// statfsType names the file system type of path from its statfs magic.
func statfsType(path string) string {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return "unknown"
	}
	switch uint32(sfs.Type) {
	case unix.EXT4_SUPER_MAGIC:
		return "ext2/3/4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case 0x2fc12fc1:
		return "zfs"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	}
	return fmt.Sprintf("unknown (statfs magic %#x)", uint32(sfs.Type))
}

// noDurableSync reports file systems on which fdatasync makes nothing
// durable, so that the report can say its figures mean nothing for a disk.
func noDurableSync(fsType string) bool {
	return fsType == "tmpfs" || fsType == "ramfs"
}
