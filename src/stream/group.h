/*-------------------------------------------------------------------------
 *
 * group.h
 *		Consumer groups (group.c): membership with leases, the assignment
 *		and its fence.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SG_GROUP_H
#define SG_GROUP_H

#include "postgres.h"

#include "utils/guc.h"

#include "catalog/sg_catalog.h"

#define SG_MAX_MEMBER_LEN		128 /* bytes of a consumer group member's name */

/* GUCs (registered by streamguard.c) */
extern int	sg_group_lease_ms;
extern int	sg_max_group_members;
extern int	sg_max_group_lease_ms;
extern int	sg_role_max_group_members;
extern int	sg_database_max_group_members;
extern bool GroupCheckLease(int *newval, void **extra, GucSource source);

/* a group member as GroupMembersSnapshot copies it out (not shared) */
typedef struct SgGroupMemberRow
{
	int32		stream_id;
	int			pid;			/* backend of the last poll */
	TimestampTz joined_at;
	TimestampTz last_poll_at;
	TimestampTz lease_until;
	char	   *consumer;
	char	   *member;
} SgGroupMemberRow;

extern int	GroupMembersSnapshot(SgGroupMemberRow **rows);

extern Size GroupShmemSize(void);
extern void GroupShmemRequest(void);
extern void GroupShmemInit(void);
extern void GroupCheckMember(const char *member);
extern void GroupCheckNotGroup(SgStreamMeta *meta, const char *consumer);
extern void GroupHeartbeat(SgStreamMeta *meta, const char *consumer, const char *member,
						   Oid roleid);
extern void GroupRebalance(SgStreamMeta *meta, const char *consumer, const char *member, char **owner);
extern long GroupHeartbeatMs(void);
extern void GroupForget(SgStreamMeta *meta, const char *consumer);

#endif							/* SG_GROUP_H */
