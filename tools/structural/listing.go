package structural

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/syntax"
	"berth.dev/berth/tools/internal/watch"
)

// Listings: a warm search of a directory takes the files to search from
// the last walk of it, kept up to date by the workspace watch, instead of
// walking (and so statting every file of) the tree again. A changed file
// the listing holds is looked at again; any other change under the
// directory (a new file, a directory, an ignore file) drops the listing,
// and the search walks, as does every search where the workspace is not
// watched. The watch skips .git, so .git/info/exclude, whose rules a walk
// honours, is looked at once per warm search instead (one Lstat): a
// listing made under another version of it is dropped.

// listing is the result of one walk: the files it queued and the files
// it skipped, by reason.
type listing struct {
	files   map[string]fs.FileInfo
	order   []string // walk order
	skipped map[string]int
	dirSet  map[string]bool // the directories of files (dirs), nil until asked
	exclude fileStamp       // .git/info/exclude as the walk began
}

// excludePath is the workspace's own ignore file that the watch cannot
// see (it skips .git).
const excludePath = ".git/info/exclude"

// fileStamp is what tells one version of a file from another without
// reading it: present or not, size, modification time.
type fileStamp struct {
	exists bool
	size   int64
	mtime  int64
}

// stampOf stats name; an error other than "does not exist" gives ok false.
func stampOf(ctx context.Context, fsys sandbox.FS, name string) (fileStamp, bool) {
	fi, err := fsys.Lstat(ctx, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fileStamp{}, true
	case err != nil:
		return fileStamp{}, false
	}
	return fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}, true
}

type listKey struct{ dir, lang string }

// listings are an Engine's walks, kept while the watch follows them.
type listings struct {
	mu    sync.Mutex // held across a drain and its updates
	hub   *watch.Hub
	sub   *watch.Sub
	lists map[listKey]*listing
}

// Follow makes warm searches of e in ws (the workspace Register binds
// the tools to) take their files from the last walk, kept current by
// watching ws when it can be watched; Close ends the watch. Without it
// every search walks.
func (e *Engine) Follow(ws sandbox.FS) {
	e.list.mu.Lock()
	defer e.list.mu.Unlock()
	if e.list.hub != nil {
		return
	}
	e.list.hub = watch.New(ws, []string{".git"})
	e.list.lists = map[listKey]*listing{}
}

// Close ends the engine's workspace watch.
func (e *Engine) Close() error {
	e.list.mu.Lock()
	hub := e.list.hub
	e.list.hub, e.list.sub, e.list.lists = nil, nil, nil
	e.list.mu.Unlock()
	if hub == nil {
		return nil
	}
	return hub.Close()
}

// listed returns the files of t's last walk, brought up to date, or false
// when t must be walked.
func (e *Engine) listed(ctx context.Context, fsys sandbox.FS, t *target) (*listing, bool) {
	l := &e.list
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hub == nil {
		return nil, false
	}
	if l.sub == nil {
		l.sub = l.hub.Subscribe(ctx)
	}
	changed, rescan := l.sub.Drain(ctx)
	if rescan != "" {
		clear(l.lists)
		return nil, false
	}
	for _, p := range changed {
		if path.Base(p) == ".gitignore" {
			clear(l.lists) // a rule may reach into any listing below it
			break
		}
		for k, ls := range l.lists {
			if k.dir != "." && p != k.dir && !strings.HasPrefix(p, k.dir+"/") {
				continue
			}
			if !ls.update(ctx, fsys, p, k.lang, e.opts.MaxFileSize) {
				delete(l.lists, k)
			}
		}
	}
	ls := l.lists[listKey{t.name, t.lang.ID}]
	if ls == nil {
		return nil, false
	}
	if now, ok := stampOf(ctx, fsys, excludePath); !ok || now != ls.exclude {
		clear(l.lists) // its rules reach every listing
		return nil, false
	}
	return ls, true
}

// update takes a change of path p into ls (a listing of language lang),
// and says whether ls still holds: a listed file changed or gone, a
// directory of listed files gone, or a file of another language, keep
// it; a new file of the language (its ignore rules unknown here) drops
// it, and the search walks. Only a path that can matter is looked at.
func (ls *listing) update(ctx context.Context, fsys sandbox.FS, p, lang string, maxSize int64) bool {
	_, listed := ls.files[p]
	if !listed {
		if l := syntax.LanguageForPath(p); l != nil && l.ID == lang {
			return false
		}
		if !ls.dirs()[p] {
			return true // another language's file, or a directory of none
		}
	}
	fi, err := fsys.Lstat(ctx, p)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false
	case err != nil:
		// Gone: a listed file, or a directory with listed files under it.
		for name := range ls.files {
			if name == p || strings.HasPrefix(name, p+"/") {
				ls.remove(name)
			}
		}
		return true
	case fi.IsDir():
		return true // its files are reported one by one
	case !fi.Mode().IsRegular() || fi.Size() > maxSize:
		return false
	}
	ls.files[p] = fi
	return true
}

// dirs returns the directories holding listed files, made once per
// change of the listing.
func (ls *listing) dirs() map[string]bool {
	if ls.dirSet == nil {
		ls.dirSet = map[string]bool{}
		for name := range ls.files {
			for d := path.Dir(name); d != "." && d != "/" && !ls.dirSet[d]; d = path.Dir(d) {
				ls.dirSet[d] = true
			}
		}
	}
	return ls.dirSet
}

// remove drops a listed file.
func (ls *listing) remove(name string) {
	delete(ls.files, name)
	ls.dirSet = nil
	if i := slices.Index(ls.order, name); i >= 0 {
		ls.order = slices.Delete(ls.order, i, i+1)
	}
}

// keep stores the result of a walk of t (listed subscribed to the watch
// before it began, so a change made while it walked is taken in later).
func (e *Engine) keep(t *target, ls *listing) {
	l := &e.list
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hub == nil || l.sub == nil {
		return
	}
	l.lists[listKey{t.name, t.lang.ID}] = ls
}
