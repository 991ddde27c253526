// Package deploy holds no code: its tests keep the deployment examples
// working. compose_test.go checks docker-compose.yml (every file it
// mounts or builds from exists, the proxy config it mounts validates, the
// ports and service names of the proxy, shop, Redis, Prometheus and
// Grafana agree); kubernetes_test.go decodes every manifest under
// kubernetes/ strictly into the Kubernetes API types and validates the
// proxy config its ConfigMaps embed.
package deploy
