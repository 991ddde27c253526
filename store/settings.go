package store

import "fmt"

// EvictionWarning says why a node's settings (CONFIG GET maxmemory,
// maxmemory-policy) may lose stock or reservation keys under memory
// pressure, "" when they cannot. Used by SettingsWarnings (preheat) and
// preflight.
func EvictionWarning(addr string, conf map[string]string) string {
	if conf["maxmemory"] != "" && conf["maxmemory"] != "0" && conf["maxmemory-policy"] != "noeviction" {
		return fmt.Sprintf("redis %s: maxmemory-policy is %s with maxmemory %s: under memory pressure Redis may evict stock or reservation keys; use noeviction", addr, conf["maxmemory-policy"], conf["maxmemory"])
	}
	return ""
}

// FullCoverageWarning says why a cluster node's
// cluster-require-full-coverage stops sales while a failed master is
// replaced, "" when it does not.
func FullCoverageWarning(addr string, conf map[string]string) string {
	if conf["cluster-enabled"] == "yes" && conf["cluster-require-full-coverage"] == "yes" {
		return fmt.Sprintf("redis %s: cluster-require-full-coverage is yes: while a failed master is replaced, the live masters refuse every buy too; no keeps them selling", addr)
	}
	return ""
}
