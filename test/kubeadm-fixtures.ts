/**
 * Files as kubeadm (v1.37) and an operator write them, shared by the unit tests of the control-plane
 * edits (test/unit/control-plane.test.ts, test/unit/kcm-handback.test.ts) and the kubeadm test.
 */

/** kube-controller-manager's static pod as kubeadm writes it; `extra` lines go after its flags. */
export const kcmManifest = (extra = '') => `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-controller-manager
    tier: control-plane
  name: kube-controller-manager
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-controller-manager
    - --authentication-kubeconfig=/etc/kubernetes/controller-manager.conf
    - --controllers=*,bootstrapsigner,tokencleaner
    - --kubeconfig=/etc/kubernetes/controller-manager.conf
    - --leader-elect=true
${extra}    image: registry.k8s.io/kube-controller-manager:v1.37.2
    name: kube-controller-manager
    volumeMounts:
    - mountPath: /etc/kubernetes/controller-manager.conf
      name: kubeconfig
      readOnly: true
  hostNetwork: true
  volumes:
  - hostPath:
      path: /etc/kubernetes/controller-manager.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
`;

/** An operator's own kube-scheduler configuration (scoring and a profile of theirs), which the install merges Ulysses' extenders into. */
export const OPERATOR_SCHEDULER_CONFIG = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
percentageOfNodesToScore: 77
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled:
      - name: ImageLocality
`;
