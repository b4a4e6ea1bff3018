// SPDX-License-Identifier: GPL-2.0-only
/*
 * kernel-crate/src/lock_shim.c — the C half of sys/lock.rs: spin_lock_irqsave() and
 * spin_unlock_irqrestore() are macros, so Rust reaches them through these two functions.
 */

#include <linux/spinlock.h>

unsigned long trapeze_spin_lock_irqsave(spinlock_t *lock);
void trapeze_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags);

unsigned long trapeze_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

void trapeze_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}
