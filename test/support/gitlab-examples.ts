/**
 * GitLab webhook payloads in the shapes GitLab sends (its "Webhook events"
 * documentation's examples, trimmed of fields nobody reads here but keeping
 * their nesting and types): Issue Hook with a label change, Note Hook on an
 * issue or a merge request, Pipeline Hook, Merge Request Hook.
 */
export const GITLAB_PATH = 'acme/app';

const user = (username: string, id = 51) => ({
  id,
  name: username,
  username,
  avatar_url: 'http://www.gravatar.com/avatar/x',
  email: '[REDACTED]',
});
const project = (id: number) => ({
  id,
  name: 'app',
  description: '',
  web_url: `https://gitlab.example.com/${GITLAB_PATH}`,
  git_http_url: `https://gitlab.example.com/${GITLAB_PATH}.git`,
  namespace: 'acme',
  path_with_namespace: GITLAB_PATH,
  default_branch: 'main',
});

export function issueLabelled(o: { projectId: number; iid: number; by: string; title?: string }) {
  const label = (title: string, id: number) => ({
    id,
    title,
    color: '#428BCA',
    project_id: o.projectId,
    type: 'ProjectLabel',
  });
  return {
    object_kind: 'issue',
    event_type: 'issue',
    user: user(o.by),
    project: project(o.projectId),
    object_attributes: {
      id: 301,
      iid: o.iid,
      title: o.title ?? 'Spelling error in the README file',
      description: 'commit has two ts',
      state: 'opened',
      action: 'update',
      url: `https://gitlab.example.com/${GITLAB_PATH}/-/issues/${o.iid}`,
    },
    labels: [label('API', 206), label('drydock', 207)],
    changes: {
      updated_at: { previous: '2026-12-05 01:00:00 UTC', current: '2026-12-05 01:00:05 UTC' },
      labels: { previous: [label('API', 206)], current: [label('API', 206), label('drydock', 207)] },
    },
    repository: { name: 'app', url: `git@gitlab.example.com:${GITLAB_PATH}.git` },
  };
}

export function noteOn(o: {
  projectId: number;
  noteId: number;
  by: string;
  note: string;
  issue?: number;
  mergeRequest?: { iid: number; source_branch: string; source_project_id?: number };
}) {
  const mr = o.mergeRequest;
  return {
    object_kind: 'note',
    event_type: 'note',
    user: user(o.by),
    project_id: o.projectId,
    project: project(o.projectId),
    object_attributes: {
      id: o.noteId,
      note: o.note,
      noteable_type: mr ? 'MergeRequest' : 'Issue',
      author_id: 51,
      system: false,
      url: `https://gitlab.example.com/${GITLAB_PATH}/-/${mr ? 'merge_requests' : 'issues'}/${mr?.iid ?? o.issue}#note_${o.noteId}`,
    },
    ...(mr
      ? {
          merge_request: {
            id: 10_000 + mr.iid,
            iid: mr.iid,
            target_branch: 'main',
            source_branch: mr.source_branch,
            source_project_id: mr.source_project_id ?? o.projectId,
            target_project_id: o.projectId,
            state: 'opened',
            title: 'drydock: a change',
          },
        }
      : { issue: { id: 92, iid: o.issue, title: 'Spelling error in the README file', state: 'opened' } }),
  };
}

export function pipelineFailed(o: {
  projectId: number;
  id: number;
  ref: string;
  sha: string;
  by: string;
  status?: string;
}) {
  return {
    object_kind: 'pipeline',
    object_attributes: {
      id: o.id,
      iid: 3,
      ref: o.ref,
      tag: false,
      sha: o.sha,
      before_sha: '0'.repeat(40),
      source: 'push',
      status: o.status ?? 'failed',
      detailed_status: o.status ?? 'failed',
      stages: ['build', 'test'],
      url: `https://gitlab.example.com/${GITLAB_PATH}/-/pipelines/${o.id}`,
    },
    merge_request: null,
    user: user(o.by),
    project: project(o.projectId),
    builds: [{ id: 380, stage: 'test', name: 'test', status: 'failed' }],
  };
}

export function mergeRequestClosed(o: {
  projectId: number;
  iid: number;
  source_branch: string;
  url: string;
  by: string;
  action: 'merge' | 'close';
}) {
  return {
    object_kind: 'merge_request',
    event_type: 'merge_request',
    user: user(o.by),
    project: project(o.projectId),
    object_attributes: {
      id: 10_000 + o.iid,
      iid: o.iid,
      target_branch: 'main',
      source_branch: o.source_branch,
      source_project_id: o.projectId,
      target_project_id: o.projectId,
      state: o.action === 'merge' ? 'merged' : 'closed',
      action: o.action,
      url: o.url,
      title: 'drydock: a change',
    },
  };
}
