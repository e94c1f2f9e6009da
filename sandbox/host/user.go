package host

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// DefaultPath is the PATH of host processes when berth itself has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultLang is the LANG of host processes when berth itself has none.
const DefaultLang = "C.UTF-8"

// DefaultPidsMax is how many processes (threads, with a control group)
// a host sandbox may have when Options.PidsMax is zero.
const DefaultPidsMax = 512

// User is an unprivileged user host processes run as.
type User struct {
	Name     string
	Uid, Gid uint32
	Groups   []uint32 // supplementary groups, from the group database
	Home     string
}

// LookupUser resolves name (a user name or a numeric uid) for
// Options.User. It refuses when berth does not run as root (only root can
// start processes as another user), and refuses root and berth's own
// user, which would hold berth's credentials.
func LookupUser(name string) (*User, error) {
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("host: run processes as user %q: berth runs as uid %d, not root, so it cannot start processes as another user; run berth as root, or leave the host user unset to run them as berth's own user", name, euid)
	}
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, fmt.Errorf("host: run processes as user %q: no such user name or uid (%v); create the user (for example `useradd --system --no-create-home berth-sandbox`) or name an existing one: %w", name, uerr, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("host: user %q has uid %q, not a number: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("host: user %q has gid %q, not a number: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("host: refusing to run host processes as %q: it is root (uid 0); name an unprivileged user", name)
	}
	if int(uid) == os.Getuid() {
		return nil, fmt.Errorf("host: refusing to run host processes as %q: it is berth's own user (uid %d), whose processes could read berth's memory and files; name a user of their own", name, uid)
	}
	hu := &User{Name: u.Username, Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}, Home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("host: list the groups of user %q: %w", name, err)
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("host: user %q is in group %q, not a number: %w", name, id, err)
		}
		if g == 0 {
			return nil, fmt.Errorf("host: refusing to run host processes as %q: it is in group 0 (root); take it out of that group or name another user", name)
		}
		if uint32(g) != hu.Gid {
			hu.Groups = append(hu.Groups, uint32(g))
		}
	}
	if gid == 0 {
		return nil, fmt.Errorf("host: refusing to run host processes as %q: its primary group is 0 (root); name an unprivileged user", name)
	}
	return hu, nil
}

// credentialFlag is the agent's --user flag for u.
func (u *User) credentialFlag() string {
	groups := make([]string, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	return fmt.Sprintf("--user=%d:%d:%s", u.Uid, u.Gid, strings.Join(groups, ","))
}

// BaseEnv is the environment every host process starts with, before
// Options.Env and the command's own: PATH (berth's, else DefaultPath),
// HOME (u's home; without u, berth's), LANG (berth's, else DefaultLang).
// Nothing else of berth's environment is passed, so a process never sees
// BERTH_TOKEN or any other credential berth holds.
func BaseEnv(u *User) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = DefaultPath
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = DefaultLang
	}
	home := "/"
	switch {
	case u != nil:
		if u.Home != "" {
			home = u.Home
		}
	case os.Getenv("HOME") != "":
		home = os.Getenv("HOME")
	default:
		if cur, err := user.Current(); err == nil && cur.HomeDir != "" {
			home = cur.HomeDir
		}
	}
	return []string{"PATH=" + path, "HOME=" + home, "LANG=" + lang}
}
