//go:build !linux

package bench

// FSInfo says where a directory's files are stored.
type FSInfo struct {
	Type   string `json:"filesystem"`
	Device string `json:"device"`
	Mount  string `json:"mount_point"`
}

func (fi FSInfo) String() string { return fi.Type }

func fsInfo(string) (FSInfo, error) { return FSInfo{Type: "unknown (only known on Linux)"}, nil }

func noDurableSync(string) bool { return false }
