// SPDX-License-Identifier: GPL-2.0-only
/*
 * kernel-crate/src/blk_shim.c — the C half of the block device's shell (sys/blk.rs):
 * what 6.12's Rust bindings cannot reach because it is a macro or a static inline.
 *
 *  - trapeze_blk_alloc_disk: blk_mq_alloc_disk() (a macro with its own lock class key),
 *    plus a block_device_operations table whose owner is THIS_MODULE, so an open
 *    /dev/gms0 pins the module, and no partition scan;
 *  - trapeze_blk_rq_op: req_op();
 *  - trapeze_blk_rq_copy: copy between a request's data pages (rq_for_each_segment,
 *    memcpy_{to,from}_bvec, i.e. kmap_local: any context) and a kernel buffer;
 *  - trapeze_blk_rq_dma_map / trapeze_dma_unmap: map bytes of a request's data for the
 *    device's DMA (dma_map_page on the segment's page, any context) and unmap them, so
 *    the NIC reads or writes the block layer's own page.
 *
 * The status codes sys/blk.rs hard-codes are checked here at compile time.
 */

#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/bvec.h>
#include <linux/build_bug.h>
#include <linux/dma-mapping.h>
#include <linux/module.h>

static_assert(BLK_STS_OK == (__force blk_status_t)0);
static_assert(BLK_STS_NOTSUPP == (__force blk_status_t)1);
static_assert(BLK_STS_TIMEOUT == (__force blk_status_t)2);
static_assert(BLK_STS_NOSPC == (__force blk_status_t)3);
static_assert(BLK_STS_IOERR == (__force blk_status_t)10);
static_assert(REQ_OP_READ == 0 && REQ_OP_WRITE == 1);

/* Called from sys/blk.rs only (its extern block has the same signatures). */
struct gendisk *trapeze_blk_alloc_disk(struct blk_mq_tag_set *set,
				       struct queue_limits *lim, void *queuedata);
unsigned int trapeze_blk_rq_op(struct request *rq);
size_t trapeze_blk_rq_copy(struct request *rq, size_t off, void *buf, size_t len,
			   bool to_rq);
dma_addr_t trapeze_blk_rq_dma_map(struct request *rq, size_t off, size_t len,
				  struct device *dev, bool to_device);
void trapeze_dma_unmap(struct device *dev, dma_addr_t addr, size_t len, bool to_device);

static const struct block_device_operations trapeze_blk_fops = {
	.owner = THIS_MODULE,
};

/* A gendisk on @set's queues (ERR_PTR on failure), not yet added. */
struct gendisk *trapeze_blk_alloc_disk(struct blk_mq_tag_set *set,
				       struct queue_limits *lim, void *queuedata)
{
	struct gendisk *disk = blk_mq_alloc_disk(set, lim, queuedata);

	if (!IS_ERR(disk)) {
		disk->fops = &trapeze_blk_fops;
		/*
		 * One whole disk, no partition scan: adding the disk would read its first
		 * block at once, before a GMS backend's members may answer.
		 */
		disk->flags |= GENHD_FL_NO_PART;
	}
	return disk;
}

unsigned int trapeze_blk_rq_op(struct request *rq)
{
	return req_op(rq);
}

/*
 * Copy @len bytes between @buf and the request's data at byte offset @off (to the request
 * if @to_rq). Returns the bytes copied: less than @len only if the request's data ends
 * first. The caller owns the request (started, not yet ended).
 */
size_t trapeze_blk_rq_copy(struct request *rq, size_t off, void *buf, size_t len,
			   bool to_rq)
{
	struct req_iterator iter;
	struct bio_vec bv;
	size_t pos = 0, done = 0;

	rq_for_each_segment(bv, rq, iter) {
		struct bio_vec part;
		size_t skip, n;

		if (done == len)
			break;
		if (pos + bv.bv_len <= off + done) {
			pos += bv.bv_len;
			continue;
		}
		skip = off + done - pos;
		n = min_t(size_t, bv.bv_len - skip, len - done);
		part.bv_page = bv.bv_page;
		part.bv_offset = bv.bv_offset + skip;
		part.bv_len = n;
		if (to_rq)
			memcpy_to_bvec(&part, (const char *)buf + done);
		else
			memcpy_from_bvec((char *)buf + done, &part);
		done += n;
		pos += bv.bv_len;
	}
	return done;
}

/*
 * Map @len bytes of the request's data at byte offset @off for @dev's DMA (to the device
 * if @to_device, else from it). They must lie in one segment (one page): returns
 * DMA_MAPPING_ERROR if they do not, or if the mapping fails. The caller owns the request
 * (started, not yet ended) and unmaps with trapeze_dma_unmap before it ends.
 */
dma_addr_t trapeze_blk_rq_dma_map(struct request *rq, size_t off, size_t len,
				  struct device *dev, bool to_device)
{
	enum dma_data_direction dir = to_device ? DMA_TO_DEVICE : DMA_FROM_DEVICE;
	struct req_iterator iter;
	struct bio_vec bv;
	size_t pos = 0;
	dma_addr_t addr;

	rq_for_each_segment(bv, rq, iter) {
		size_t skip;

		if (pos + bv.bv_len <= off) {
			pos += bv.bv_len;
			continue;
		}
		skip = off - pos;
		if (bv.bv_len - skip < len)
			return DMA_MAPPING_ERROR;
		addr = dma_map_page(dev, bv.bv_page, bv.bv_offset + skip, len, dir);
		return dma_mapping_error(dev, addr) ? DMA_MAPPING_ERROR : addr;
	}
	return DMA_MAPPING_ERROR;
}

void trapeze_dma_unmap(struct device *dev, dma_addr_t addr, size_t len, bool to_device)
{
	dma_unmap_page(dev, addr, len, to_device ? DMA_TO_DEVICE : DMA_FROM_DEVICE);
}
