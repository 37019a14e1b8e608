/**
 * What Ulysses' controller manager and the kcm handback (manifests/kcm-handback.ts) agree on about
 * kube-controller-manager's static pods.
 */

/** kubeadm's label on kcm's static pod (and its mirror pod in kube-system). */
export const KCM_POD_SELECTOR = 'component=kube-controller-manager';

/**
 * On kcm's static pod (so on its mirror pod) while it runs the controllers Ulysses replaces, handed
 * back because Ulysses' controller manager had no leader; its value is when. A controller manager
 * that becomes leader starts its controllers only once no kcm pod carries it.
 */
export const KCM_HANDBACK_ANNOTATION = 'ulysses.io/controllers-handed-back';
